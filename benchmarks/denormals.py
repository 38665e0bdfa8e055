"""Local training with PyTorch's default arithmetic against denormals flushed to zero, as runners train.

Runners, the server and an in-process run flush denormal floats (below 1.2e-38) to zero
(emulator.training.local.set_torch_arithmetic). This prints, for the LSTM of the Shakespeare scenarios and
for the MLP and CNN of the image scenarios, the seconds a local step takes either way (one thread, as
runners train), measured in the same process, the two ways alternating, and the training loss each way
reaches. Where training produces denormals (an LSTM's saturated gates as it learns a text), the default
arithmetic is several times slower; elsewhere the two are the same.

    .venv/bin/python benchmarks/denormals.py [--steps 100] [--repeat 3]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from emulator.data.leaf import encode_text
from emulator.models.zoo import build_model
from emulator.parts import load_parts
from emulator.training.local import LocalTraining, seeded_generator, train_locally

TEXT = "to be, or not to be, that is the question: " * 40  # slows down as the LSTM learns to repeat it


def text_data() -> tuple[torch.Tensor, torch.Tensor]:
    """Every 80-character window of TEXT and the character after it, as the Shakespeare loader makes them."""
    windows = [TEXT[i:i + 80] for i in range(len(TEXT) - 80)]
    x = np.stack([encode_text(w) for w in windows])
    y = encode_text("".join(TEXT[i + 80] for i in range(len(TEXT) - 80))).astype(np.int64)
    return torch.from_numpy(x.astype(np.int64)), torch.from_numpy(y)


def image_data(shape: tuple, n: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, *shape)).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy((x.reshape(n, -1)[:, :10].argmax(1)).astype(np.int64))


CASES = {  # name: (model, input shape, classes, data, batch size, optimizer, learning rate)
    "char_lstm (Shakespeare)": ("char_lstm", (80,), 80, text_data, 16, "adam", 0.01),
    "mlp (Fashion-MNIST shape)": ("mlp", (1, 28, 28), 10, lambda: image_data((1, 28, 28)), 32, "sgd", 0.05),
    "cnn_fmnist": ("cnn_fmnist", (1, 28, 28), 10, lambda: image_data((1, 28, 28)), 32, "sgd", 0.05),
}


def seconds_per_step(case: tuple, steps: int, flush: bool) -> tuple[float, float]:
    name, shape, classes, data, batch, optimizer, lr = case
    torch.set_flush_denormal(flush)
    inputs, labels = data()
    model = build_model(name, shape, classes, seed=0)
    spec = LocalTraining(lr=lr, batch_size=batch, local_steps=steps, optimizer=optimizer)
    start = time.perf_counter()
    stats = train_locally(model, inputs, labels, spec, seeded_generator(0))
    return (time.perf_counter() - start) / steps, stats.loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="local steps a measurement (default 100)")
    parser.add_argument("--repeat", type=int, default=3, help="measurements each way (default 3)")
    args = parser.parse_args()
    load_parts()  # the built-in models, by name
    torch.set_num_threads(1)  # as runners train
    print(f"{args.steps} local steps, one thread, median of {args.repeat}")
    print("| model | s/step, PyTorch's default | s/step, denormals flushed | speed-up | mean loss, default "
          "| mean loss, flushed |")
    print("|---|---|---|---|---|---|")
    for label, case in CASES.items():
        default, flushed = [], []
        for _ in range(args.repeat):  # alternating, so a drift of the machine's speed hits both alike
            default.append(seconds_per_step(case, args.steps, False))
            flushed.append(seconds_per_step(case, args.steps, True))
        slow, fast = statistics.median(t for t, _ in default), statistics.median(t for t, _ in flushed)
        print(f"| {label} | {slow:.4f} | {fast:.4f} | {slow / fast:.2f}x | {default[0][1]:.4f} | {flushed[0][1]:.4f} |")
    torch.set_flush_denormal(False)


if __name__ == "__main__":
    main()
