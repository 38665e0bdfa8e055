"""Central evaluation: the global model on the test set, on the evaluation schedule.

The test loss and accuracy, the worst class and its accuracy, and each class's accuracy (for
class_accuracy.csv). Evaluated on a runner: on its GPU where runners have one (the same arithmetic as
the server's CPU).
"""
from __future__ import annotations

import math

from emulator.recording import bias
from emulator.runtime import inline
from emulator.server.observers.base import Observer


class CentralEvaluation(Observer):
    columns = ("test_loss", "test_acc", "worst_class", "worst_class_acc")

    def after_round(self, record, played) -> dict:
        if not self.evaluates(record):
            return {}
        world = self.world
        loss, acc, correct, total = inline.get(world.pool.runners[0].evaluate.remote(
            world.run, world.params_ref(), world.scenario.evaluation.batch_size))
        accuracy = bias.class_accuracy(correct, total)
        record.class_accuracy = [None if math.isnan(a) else float(a) for a in accuracy]
        worst, worst_acc = bias.worst_class(accuracy)
        return {"test_loss": None if math.isnan(loss) else loss, "test_acc": None if math.isnan(acc) else acc,
                "worst_class": worst, "worst_class_acc": worst_acc}
