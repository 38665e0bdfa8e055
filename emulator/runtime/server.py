"""The server: owns the global model, the algorithm and the simulated world, and runs one round per call.

Each round: the algorithm plans it, the system model decides who reports and when, the reporting devices
train for real on the runner pool, their updates stream into the algorithm's aggregation, and the round
becomes one metrics row. The server never writes files: the driver does, so results stay at the edge.
"""
from __future__ import annotations

import math
import pickle

import numpy as np
import ray

from emulator import params as param_vector
from emulator.algorithms import AlgorithmContext, ClientUpdate, build_algorithm
from emulator.algorithms.asynchronous import Arrival
from emulator.algorithms.selection import distinct_in_draw_order
from emulator.evaluation.acceptance import acceptance_by_group, acceptance_columns
from emulator.evaluation.fleet import FleetEvaluation, groupings
from emulator.models.zoo import build_model
from emulator.parts.loading import load_parts
from emulator.parts.plugins import GuardedAlgorithm, guard, is_plugin
from emulator.recording import bias
from emulator.recording.recorder import CLASS_ACCURACY, DEVICE_EVAL
from emulator.registry import ALGORITHMS
from emulator.runtime import inline
from emulator.runtime.adversaries import COLUMNS as ADVERSARY_COLUMNS
from emulator.runtime.adversaries import Adversaries
from emulator.runtime.grouping import DeviceCost, group_jobs
from emulator.runtime.pool import RunnerPool
from emulator.runtime.runner import DeviceJob, unbox
from emulator.scenario import Scenario, ScenarioError
from emulator.seeding import rng, torch_seed
from emulator.system import CohortRequest, SimulatedSystem, build_system
from emulator.system.base import RoundOutcome, SecureAggregation
from emulator.system.device_evaluation import evaluate_sample
from emulator.system.simulated import SECAGG_COLUMNS
from emulator.system.stream import AsyncStream
from emulator.training import cohort
from emulator.training import precision as numerics
from emulator.training.local import LocalTraining, seed_dropout, seeded_generator, set_torch_threads, train_locally
from emulator.uplink.pipeline import UploadPipeline
from emulator.uplink.secagg import SecAggCost

BASE_COLUMNS = ("round", "kind", "failed", "sim_start_s", "sim_time_s", "round_duration_s", "selected",
                "participants", "dropped", "stragglers", "cancelled", "bytes_down", "bytes_up",
                "server_compute_s", "train_loss", "train_acc", "test_loss", "test_acc", "label_tv", "label_tv_floor",
                "unseen_share", "worst_class", "worst_class_acc", "wall_time_s")
ASYNC_COLUMNS = ("version", "staleness_mean", "staleness_max", "concurrency_mean", "concurrency_max",
                 "wasted_compute_s")  # asynchronous algorithms: a row is a server update


class FederatedServer:
    def __init__(self, scenario: dict | None = None, context_box: list | None = None, runners: list | None = None,
                 torch_threads: int | None = None):
        """Set up for a run at once when given one. The driver starts the server actor empty, so that its
        process imports torch while the driver still loads the data, and gives it the run with `setup`."""
        if scenario is not None:
            self.setup(scenario, context_box, runners, torch_threads)

    def ping(self) -> bool:
        return True

    def setup(self, scenario: dict, context_box: list, runners: list, torch_threads: int | None = None,
              validated: bytes | None = None, state_dir: str | None = None) -> None:
        """`validated`: the driver's Scenario, pickled. Taken as it is, not validated again here: this process
        may run elsewhere (a warm instance started in another directory, another node), where a check of a
        relative path, a plugin's or ours, would look in the wrong place. `state_dir`: where a personalized
        algorithm keeps its devices' state (the run directory's device_state/; None: a temporary one)."""
        set_torch_threads(torch_threads)  # as the runners: server-side training and evaluation
        self.state_dir, self.device_cost = state_dir, DeviceCost()  # what a device's training takes: the tasks' size
        load_parts(scenario.get("plugins", []))  # before unpickling or validating: the plugins' classes
        self.scenario = pickle.loads(validated) if validated is not None else Scenario.model_validate(scenario)
        self.context_box = context_box
        context = unbox(context_box)
        self.run_key = context.key
        federation = context.federation
        self.model = build_model(context.model_name, federation.train.input_shape, federation.train.num_classes,
                                 context.model_seed, context.model_options)
        self.precision = context.precision  # runtime.precision: server training and evaluation too
        numerics.prepare_model(self.model, self.precision)
        self.params = param_vector.flatten(self.model)
        self.model_bytes = param_vector.nbytes(self.model)
        self.sizes = federation.sizes
        self.num_classes = federation.train.num_classes
        self.label_counts = federation.label_counts()  # (devices, classes): what each device's data is
        self.population_mix = bias.population_mix(self.label_counts)
        self._floors: dict[int, float] = {}  # cohort size -> random-cohort TV floor (from the seed: not saved)
        self.server_x, self.server_y = federation.train.tensors(federation.server_indices)
        self.server_samples_this_round = 0
        self.upload = UploadPipeline(self.scenario, len(self.params), lambda: self.state_dir)  # DP, compression
        self.secagg = None  # secure aggregation's cost model (emulator/uplink/secagg.py)
        if self.scenario.secure_aggregation is not None:
            config = self.scenario.secure_aggregation
            self.secagg = SecAggCost(config.kind, len(self.params), config.input_bits, config.threshold,
                                     config.neighbours, config.malicious)
        entry = ALGORITHMS.get(self.scenario.algorithm.name)
        with guard(entry.origin, f"algorithm {entry.name!r}", "__init__"):
            self.algorithm = build_algorithm(self.scenario.algorithm, AlgorithmContext(
                num_devices=federation.num_devices, device_sizes=self.sizes, num_params=len(self.params),
                seed=self.scenario.seed, server_samples=len(federation.server_indices), server_train=self.server_train,
                parameter_mask=param_vector.parameter_mask(self.model), total_rounds=self.scenario.rounds,
                release=self.upload.release if self.upload.dp is not None else None, model_name=context.model_name,
                parameter_layout=param_vector.layout(self.model), state_dir=lambda: self.state_dir))
        if is_plugin(entry.origin):  # a user's hooks are guarded and what they return is checked
            self.algorithm = GuardedAlgorithm(self.algorithm, entry.origin, entry.name, len(self.params))
        self.transfer_bytes = int(round(self.model_bytes * self.algorithm.shared_share))  # what travels
        self.adversaries = Adversaries.of(self.scenario.population, self.num_classes, self.scenario.seed)
        self.system = build_system(self.scenario, self.label_counts)
        # with a robust aggregator: how often each group's honest reports were accepted (acceptance.py)
        self.accept_groups = groupings(self.system.describe_devices()) \
            if self.scenario.algorithm.aggregator is not None else {}
        self.fleet = None  # evaluation.devices: the global model on every device's own test split
        if self.scenario.evaluation.devices is not None:
            config = self.scenario.evaluation.devices
            self.fleet = FleetEvaluation(federation.local_sizes, self.system.describe_devices(), config.oracle,
                                         config.sample is not None, config.finetune is not None)
        self.pool = RunnerPool(runners)
        self.unseen = bias.UnseenData(self.sizes, self.system.ledger.counts["reported"])
        self.round = 0
        self.stream, self._stream_state = None, None  # asynchronous algorithms: emulator/system/stream.py
        self.version = 0  # server updates applied (asynchronous algorithms)
        self._versions: dict[int, np.ndarray] = {}  # model versions devices in flight downloaded
        self._version_refs: dict[int, object] = {}
        self._pending: dict[int, tuple] = {}  # task id -> (object ref of its group's updates, index)
        self._next_runner = 0
        self._events: list[tuple] = []
        self._ledgers: dict[int, dict] = {}
        self._keep_participation()

    def get_columns(self) -> tuple[str, ...]:
        extra = ASYNC_COLUMNS if self.asynchronous else ()
        secure = SECAGG_COLUMNS if self.secagg is not None else ()
        fleet = self.fleet.columns if self.fleet is not None else ()
        hostile = () if self.adversaries is None else ADVERSARY_COLUMNS + (
            ("backdoor_success",) if self.adversaries.backdoor is not None else ())
        hostile += acceptance_columns(self.accept_groups)
        return BASE_COLUMNS + extra + self.upload.columns + secure + fleet + hostile + tuple(self.algorithm.columns)

    @property
    def asynchronous(self) -> bool:
        return bool(getattr(self.algorithm, "asynchronous", False))

    def run_round(self) -> dict:
        row = self._play_round()
        self._keep_participation()
        return row

    def _keep_participation(self) -> None:
        """Keep the ledger as it stood after this round (and the one before), so the driver can write
        participation.csv for the last round it saved even while the next one is in flight."""
        self._ledgers[self.round] = self.system.ledger.state()
        for old in [r for r in self._ledgers if r < self.round - 1]:
            del self._ledgers[old]

    def _play_round(self) -> dict:
        self.round += 1
        seed, r = self.scenario.seed, self.round
        self.server_samples_this_round, self._acceptance_row = 0, None
        self.upload.begin_round()
        plan = self.algorithm.plan_round(r)
        if plan.kind == "async":
            return self._play_async_update(r, plan)
        if plan.kind == "server":
            self.params, server_stats = self.algorithm.server_round(self.params, r)
            outcome = self.system.server_round(self.server_samples_this_round)
            nobody = np.zeros(0, np.int64)
            return self._row(r, plan, outcome, nobody, nobody, [server_stats])
        down, up = self.algorithm.payload
        outcome = self.system.client_round(CohortRequest(
            round_index=r, target=plan.cohort, selection=plan.selection, rng=rng(seed, "selection", r),
            bytes_down=down * self.transfer_bytes, bytes_up=self.upload_bytes(up),
            samples_processed=lambda devices: self.algorithm.samples_processed(devices, self.sizes),
            snapshot=plan.kind == "snapshot", wait_for_all=plan.wait_for_all, secure=self._secure(r)))
        devices, counts = distinct_in_draw_order(outcome.reported)
        algorithm = self.algorithm
        how, hostile = algorithm.personal, self.adversaries  # own state (FedPer, Ditto), attackers' attacks
        jobs = [DeviceJob(self.run_key, int(d), algorithm.local_training(int(d)), torch_seed(seed, "train", r, int(d)),
                          int(c), algorithm.job_payload(int(d)), how,
                          None if how is None else algorithm.own_state(int(d)),
                          None if hostile is None else hostile.attack_of(int(d)), torch_seed(seed, "attack", r))
                for d, c in zip(devices, counts)]
        updates: list[ClientUpdate] = []

        runtime = self.scenario.runtime
        groups = group_jobs(jobs, runtime.group_size, runtime.vectorise, len(self.pool.runners), self.model_bytes,
                            self.device_cost.seconds)

        def trained():
            if not groups:
                return
            params_ref = self.pool.put(self.params)
            with self.device_cost.timing(len(jobs), len(self.pool.runners)):
                for group in self.pool.map_ordered(groups, lambda runner, group: runner.train_group.remote(
                        self.context_box, params_ref, group, runtime.vectorise)):
                    yield from group

        def streamed():  # colluders agree on one update: the round's updates are all in before they send it
            for update in trained() if hostile is None else hostile.colluded(trained()):
                update = self.upload.encode(update, r, (r, update.device))
                updates.append(update)
                yield update

        self.params = algorithm.aggregate(self.params, streamed(), r)
        self._record_acceptance(devices)
        operations = algorithm.server_operations()
        if self.server_samples_this_round or operations:  # server learning (FSL), a robust rule: time too
            outcome.server_compute_s = self.system.charge_server(self.server_samples_this_round, operations)
            outcome.end_s = self.system.now_s
        self._events = [(r, t, d, e) for t, d, e in outcome.events]
        return self._row(r, plan, outcome, devices, counts, [u.stats for u in updates])

    def _play_async_update(self, r: int, plan) -> dict:
        """One server update of an asynchronous algorithm (a metrics row).

        The stream runs the clock until `plan.cohort` reports are in. Devices dispatched meanwhile start
        training at once on the runners, from the model version they downloaded; the reports are applied in
        simulated-time order, each with its staleness, so the numbers never depend on which runner finishes
        first or how many there are."""
        stream = self._stream(plan)
        segment = stream.advance(plan.cohort, self.version)
        self._versions[self.version] = self.params  # what this segment's dispatches downloaded
        self._submit([task for task in segment.dispatched if task.outcome == "report"])
        results = [self._result(task) for task in segment.reports]
        if self.adversaries is not None:  # colluders in one buffer send one update
            results = self.adversaries.colluded(results)
        arrivals = [Arrival(self.upload.encode(update, self.round, ("task", task.task_id)), self.version - task.version,
                            self._versions[task.version]) for update, task in zip(results, segment.reports)]
        server_s = 0.0
        if arrivals:
            self.params = self.algorithm.apply(self.params, arrivals, r)
            self.version += 1
            operations = self.algorithm.server_operations()
            if operations:  # a robust rule's time: reports due meanwhile wait for it
                server_s = self.system.charge_server(0, operations)
        needed = {task.version for task in stream.in_flight() if task.outcome == "report"} | {self.version}
        self._versions = {v: p for v, p in self._versions.items() if v in needed}
        self._version_refs = {v: ref for v, ref in self._version_refs.items() if v in needed}
        outcome = RoundOutcome(
            start_s=segment.start_s, end_s=segment.end_s, selected=segment.devices("dispatched"),
            reported=segment.devices("reports"), dropped=segment.devices("finished", "dropped"),
            stragglers=segment.devices("finished", "abandoned"), bytes_down=segment.bytes_down,
            bytes_up=segment.bytes_up, failed=segment.failed, server_compute_s=server_s)
        outcome.end_s += server_s
        if self.system.config.events:  # trips as events.csv rows: dispatched, then how each ended
            ended = {"report": "reported", "dropped": "dropped", "abandoned": "straggler"}
            events = [(t.dispatched_s, t.device, "selected") for t in segment.dispatched]
            events += [(t.ends_s, t.device, ended[t.outcome]) for t in segment.finished]
            self._events = [(r, time, device, event) for time, device, event in sorted(events)]
        devices, counts = distinct_in_draw_order(outcome.reported)
        self._record_acceptance(np.array([a.update.device for a in arrivals], np.int64))
        staleness = [a.staleness for a in arrivals]
        row = self._row(r, plan, outcome, devices, counts, [a.update.stats for a in arrivals])
        row.update(version=self.version, staleness_mean=float(np.mean(staleness)) if staleness else None,
                   staleness_max=max(staleness) if staleness else None, concurrency_mean=segment.concurrency_mean,
                   concurrency_max=segment.concurrency_max, wasted_compute_s=segment.wasted_compute_s)
        return row

    def _record_acceptance(self, devices: np.ndarray) -> None:
        """The round's attacker columns and, under a robust aggregator, each group's honest acceptance."""
        acceptance, hostile = self.algorithm.accepted_updates(), self.adversaries
        self._acceptance_row = {} if hostile is None else hostile.columns(devices, acceptance)
        if self.accept_groups and acceptance is not None:
            self._acceptance_row.update(acceptance_by_group(*acceptance, self.accept_groups,
                                                        None if hostile is None else ~hostile.attacker))

    def _stream(self, plan):
        """The asynchronous protocol's stream, built at the first update (it needs the payload sizes)."""
        if self.stream is None:
            down, up = self.algorithm.payload
            self.stream = AsyncStream(
                self.system, self.algorithm.concurrency, plan.selection, self.scenario.seed,
                down * self.transfer_bytes, self.upload_bytes(up),
                lambda devices: self.algorithm.samples_processed(devices, self.sizes),
                deadline_s=self.system.config.deadline_s)
            if self._stream_state is not None:
                self.stream.load_state(self._stream_state)
        return self.stream

    def _submit(self, tasks: list) -> None:
        """Start training the tasks that will report, from their version, on the runners (groups cut from
        the dispatch order; a task's runner follows its group's place, never a finishing order)."""
        if not tasks:
            return
        runtime, seed = self.scenario.runtime, self.scenario.seed
        hostile = self.adversaries
        jobs = [DeviceJob(self.run_key, task.device, self.algorithm.local_training(task.device),
                          torch_seed(seed, "train-async", task.task_id), 1, self.algorithm.job_payload(task.device),
                          attack=None if hostile is None else hostile.attack_of(task.device),
                          attack_seed=torch_seed(seed, "attack", task.version))
                for task in tasks]
        by_version: dict[int, list] = {}
        for task, job in zip(tasks, jobs):
            by_version.setdefault(task.version, []).append((task, job))
        for version, pairs in by_version.items():
            if version not in self._version_refs:
                self._version_refs[version] = self.pool.put(self._versions[version])
            groups = group_jobs(pairs, runtime.group_size, runtime.vectorise, len(self.pool.runners), self.model_bytes)
            for group in groups:
                runner = self.pool.runners[self._next_runner % len(self.pool.runners)]
                self._next_runner += 1
                ref = runner.train_group.remote(self.context_box, self._version_refs[version],
                                                [job for _, job in group], runtime.vectorise)
                for index, (task, _) in enumerate(group):
                    self._pending[task.task_id] = (ref, index)

    def _result(self, task) -> ClientUpdate:
        """A reporting task's update as trained, before the uplink (trained now if it was in flight at a
        checkpoint this run resumed from)."""
        if task.task_id not in self._pending:
            self._submit([task])
        ref, index = self._pending.pop(task.task_id)
        return inline.get(ref)[index]

    def _row(self, r: int, plan, outcome, devices, counts, stats) -> dict:
        trained = [s for s in stats if s.steps > 0]
        row = {
            "round": r, "kind": plan.kind, "failed": int(outcome.failed), "sim_start_s": outcome.start_s,
            "sim_time_s": outcome.end_s, "round_duration_s": outcome.duration_s,
            "selected": len(np.unique(outcome.selected)), "participants": len(devices),
            "dropped": len(outcome.dropped), "stragglers": len(outcome.stragglers),
            "cancelled": len(outcome.cancelled),
            "bytes_down": int(outcome.bytes_down), "bytes_up": int(outcome.bytes_up),
            "server_compute_s": outcome.server_compute_s,
            "train_loss": float(np.mean([s.loss for s in trained])) if trained else None,
            "train_acc": float(np.mean([s.accuracy for s in trained])) if trained else None,
            "test_loss": None, "test_acc": None, **self._bias(outcome, devices, counts),
            "worst_class": None, "worst_class_acc": None,
        }
        if r % self.scenario.evaluation.every == 0 or r == self.scenario.rounds:
            row["test_loss"], row["test_acc"], accuracy = self.evaluate_classes()
            row["worst_class"], row["worst_class_acc"] = bias.worst_class(accuracy)
            row[CLASS_ACCURACY] = [None if math.isnan(a) else float(a) for a in accuracy]
            if self.fleet is not None:
                row.update(self._evaluate_devices(r, outcome.end_s))
        row.update(self._acceptance_row or {})  # the attackers' share and each group's, where measured
        backdoor = self.adversaries.backdoor if self.adversaries is not None else None
        if backdoor is not None and row["test_acc"] is not None:
            row["backdoor_success"] = inline.get(self.pool.runners[0].evaluate_backdoor.remote(
                self.run_key, self.context_box, self.pool.put(self.params), self.scenario.evaluation.batch_size,
                backdoor))
        row.update(outcome.protocol)
        row.update(self.upload.round_stats(self.system.ledger.counts["reported"] if self.upload.dp else None))
        row.update(self.algorithm.after_round(row))
        return row

    def _bias(self, outcome, devices, counts) -> dict:
        """The round's label TV against the population and its random-cohort floor (empty without
        reports: server rounds, failed rounds), and the share of samples never reported so far."""
        maybe_new = np.concatenate([np.asarray(outcome.selected, np.int64), np.asarray(devices, np.int64)])
        unseen = self.unseen.update(maybe_new, self.system.ledger.counts["reported"])
        weighting = getattr(self.scenario.algorithm, "weighting", "uniform")
        mix = bias.label_mix(self.label_counts, devices, counts, weighting) if len(devices) else None
        if mix is None:
            return {"label_tv": None, "label_tv_floor": None, "unseen_share": unseen}
        return {"label_tv": bias.total_variation(mix, self.population_mix),
                "label_tv_floor": self.label_tv_floor(len(devices), weighting), "unseen_share": unseen}

    def label_tv_floor(self, size: int, weighting: str) -> float:
        """The mean label TV of uniformly random cohorts of `size` devices: computed once per size, from the
        seed alone, so that it is the same after a resume and with any number of runners."""
        if size not in self._floors:
            self._floors[size] = bias.random_cohort_floor(
                self.label_counts, size, weighting, rng(self.scenario.seed, "label-tv-floor", size),
                population=self.population_mix)
        return self._floors[size]

    def _secure(self, r: int) -> SecureAggregation | None:
        if self.secagg is None:
            return None
        return SecureAggregation(self.secagg, self.scenario.secure_aggregation.device_slowdown,
                                 rng(self.scenario.seed, "secagg", r))

    def upload_bytes(self, vectors: int) -> int:
        """What a reporting device uploads: `vectors` model-sized vectors, the update encoded when compressed
        (the encoder counts its payload: values, indices, scales)."""
        encoded = self.upload.encoded_bytes()
        return vectors * self.transfer_bytes if encoded is None else encoded + (vectors - 1) * self.transfer_bytes

    def server_train(self, params: np.ndarray, spec, purpose: str):
        """SGD on the server's own data set from `params` (SAFARI's server rounds, FSL's server learning).

        Its samples are charged to the simulated clock at the server's speed."""
        param_vector.load(self.model, params)
        seed = torch_seed(self.scenario.seed, "server-train", purpose)
        seed_dropout(seed)  # the server trains on the CPU
        stats = train_locally(self.model, self.server_x, self.server_y, spec, seeded_generator(seed),
                              precision=self.precision)
        self.server_samples_this_round += int(spec.samples_processed(len(self.server_y)))
        return param_vector.flatten(self.model), stats

    def attach_directory(self, state_dir: str) -> None:
        """A fresh run's directory exists only after the server is set up: where device state goes from now."""
        self.state_dir = state_dir

    def get_state(self) -> dict:
        """Everything that carries over between rounds, for a checkpoint after round `round`. An asynchronous
        run adds its stream (the devices in flight) and the model versions they downloaded: those still to
        report are trained again after a resume, from the same version with the same seed."""
        state = {"round": self.round, "params": self.params.copy(), "algorithm": self.algorithm.state(),
                 "system": self.system.state()}
        upload = self.upload.state()
        if upload:  # residuals (device state), the clip and the accountant's releases
            state["upload"] = upload
        if self.asynchronous:
            state["async"] = {"version": self.version, "versions": {v: p.copy() for v, p in self._versions.items()},
                              "stream": self.stream.state() if self.stream is not None else self._stream_state}
        return state

    def load_state(self, state: dict) -> int:
        self.round = state["round"]
        self.params = np.asarray(state["params"], dtype=np.float32).copy()
        self.algorithm.load_state(state["algorithm"])
        self.system.load_state(state["system"])
        self.upload.load_state(state.get("upload", {}))
        if "async" in state:
            self.version = state["async"]["version"]
            self._versions = {int(v): np.asarray(p, np.float32).copy() for v, p in state["async"]["versions"].items()}
            self._version_refs, self._pending, self.stream = {}, {}, None
            self._stream_state = state["async"]["stream"]
        self.unseen.reset(self.system.ledger.counts["reported"])
        self._ledgers = {}
        self._keep_participation()
        return self.round

    def preflight(self) -> list[str]:
        """Refuse a deadline that no device can ever meet, or a precision this machine's CPU (where the server
        trains and evaluates) lacks, before the first round. Returns notes for the user (e.g. why devices
        train one at a time although runtime.vectorise asks otherwise)."""
        import platform


        numerics.require(self.precision, "cpu", f"the server on {platform.node() or 'its node'}")
        notes = []
        why_not = cohort.supports(self.model) if self.scenario.runtime.vectorise else None
        if why_not:
            notes.append(f"runtime.vectorise: model {self.scenario.model.name!r} trains one device at a time: {why_not}")
        self._check_upload()
        if self.upload.dp is not None:
            notes.append(f"privacy: dp_epsilon is {self.upload.accountant.label}; here the system model decides who "
                         "reports, so that assumption does not hold. dp_epsilon_device_max and participation.csv's "
                         "dp_epsilon bound each device without it (docs/privacy.md)")
        if not isinstance(self.system, SimulatedSystem):
            return notes
        down, up = self.algorithm.payload
        everyone = np.arange(len(self.sizes))
        fastest = self.system.fastest_round_s(down * self.transfer_bytes, self.upload_bytes(up),
                                              self.algorithm.samples_processed(everyone, self.sizes))
        config = self.system.config
        for field, deadline in (("system.deadline_s", config.deadline_s),
                                ("system.snapshot_deadline_s", config.snapshot_deadline_s)):
            if deadline is not None and fastest > deadline:
                raise ScenarioError(
                    f"{field}: {deadline:g} s, but even the fastest device needs {fastest:.1f} s to download the "
                    f"model, train and upload (population.compute / population.network, {self.model_bytes} model "
                    "bytes); raise the deadline, lighten the local work, or speed up the devices")
        return notes

    def _check_upload(self) -> None:
        """Compression needs to know the model: k within it, and one update vector to encode."""
        scheme, values = self.scenario.compression, len(self.params)
        if self.secagg is not None and self.algorithm.payload[1] != 1:
            raise ScenarioError(f"secure_aggregation: algorithm {self.scenario.algorithm.name!r} uploads "
                                f"{self.algorithm.payload[1]} vectors a device, and the cost model masks one; use a "
                                "FedAvg-family algorithm with secure aggregation")
        if scheme.kind == "none":
            return
        if self.algorithm.shared_share < 1:
            raise ScenarioError(f"compression: algorithm {self.scenario.algorithm.name!r} keeps part of the model on "
                                "the devices, and the encoders count every entry of the update; use compression: "
                                "{kind: none} with it")
        if self.algorithm.payload[1] != 1:
            raise ScenarioError(f"compression: algorithm {self.scenario.algorithm.name!r} uploads "
                                f"{self.algorithm.payload[1]} vectors a device (e.g. SCAFFOLD's control variate), and "
                                "only the model delta has an encoder; use compression: {kind: none} with it")
        if scheme.kind == "top_k" and scheme.k is not None and scheme.k > values:
            raise ScenarioError(f"compression.k: {scheme.k}, but model {self.scenario.model.name!r} has {values} "
                                f"values; give k <= {values}, or fraction: a share of the model (e.g. 0.01)")

    def take_events(self) -> list[tuple]:
        """The last round's device events (round, time_s, device, event), when system.events is on."""
        events, self._events = self._events, []
        return events

    def participation(self) -> dict[str, np.ndarray]:
        """Per-device columns for participation.csv: counters, sample counts and the device's profile."""
        return self.participation_after(self.round)

    @ray.method(concurrency_group="report")
    def participation_after(self, round_index: int) -> dict[str, np.ndarray] | None:
        """participation.csv's columns as they stood after `round_index` (None if no longer kept).

        Answered at once, even while a round is in flight (its own concurrency group): a stopped run
        writes the participation of the last round it saved without waiting for the next one."""
        ledger = self._ledgers.get(round_index)
        if ledger is None:
            return None
        columns = {"device": np.arange(len(self.sizes)), "samples": self.sizes, **ledger,
                   **self.system.describe_devices()}
        if self.upload.dp is not None:  # each device's sampling-free bound over the rounds it reported in
            columns["dp_epsilon"] = self.upload.device_epsilons(ledger["reported"])
        return columns

    def evaluate(self) -> tuple[float, float]:
        loss, acc, _ = self.evaluate_classes()
        return loss, acc

    def evaluate_classes(self) -> tuple[float | None, float | None, np.ndarray]:
        """Test loss, accuracy (None where there is no test set) and per-class accuracy (NaN for a class
        without test samples)."""
        # on a runner: on its GPU where runners have one (the same arithmetic as here on CPUs)
        loss, acc, correct, total = inline.get(self.pool.runners[0].evaluate.remote(
            self.run_key, self.context_box, self.pool.put(self.params), self.scenario.evaluation.batch_size))
        return (None if math.isnan(loss) else loss), (None if math.isnan(acc) else acc), \
            bias.class_accuracy(correct, total)

    def _evaluate_devices(self, r: int, now_s: float) -> dict:
        """This evaluation on the devices' own splits: the oracle's and the sampled devices' columns (and
        device_eval.csv's rows, under DEVICE_EVAL). The sample is asked at the round's end, on its own
        budget and random stream (emulator/system/device_evaluation.py)."""
        config, outcome = self.scenario.evaluation.devices, None
        tuning = None if config.finetune is None else LocalTraining(
            lr=config.finetune.lr, batch_size=config.finetune.batch_size, local_steps=config.finetune.steps,
            optimizer=config.finetune.optimizer)
        if config.sample is not None:
            deadline = config.deadline_s if config.deadline_s is not None else self.scenario.system.deadline_s
            outcome = evaluate_sample(self.system, now_s, config.sample, self.fleet.local_sizes, self.transfer_bytes,
                                      deadline, rng(self.scenario.seed, "device-evaluation", r),
                                      None if tuning is None else tuning.samples_processed(self.sizes))
        devices = self.fleet.scored_devices(outcome)
        reported = self.system.ledger.counts["reported"]
        loss, correct = self._device_scores(devices)
        columns, table = self.fleet.score(devices, loss, correct, reported, outcome)
        if tuning is not None:
            tuned = table["device"]  # the devices scored: every one with a split (oracle), else those that answered
            scores = self._finetune(r, tuning, tuned)
            self.fleet.score_finetuned(tuned, scores, reported, columns, table, outcome)
        if config.csv:
            columns[DEVICE_EVAL] = table
        return columns

    def _device_scores(self, devices: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Each local test sample's loss and correctness for `devices` (None: all), device after device: the
        global model in one pass, except that a device with state of its own (FedPer, Ditto) is scored with
        its own model (on the runners, in chunks spread over them)."""
        params_ref, batch = self.pool.put(self.params), self.scenario.evaluation.batch_size
        how, sizes = self.algorithm.personal, self.fleet.local_sizes
        order = np.arange(len(sizes)) if devices is None else np.asarray(devices, np.int64)
        holding = np.isin(order, self.algorithm.devices_with_state()) if how is not None else np.zeros(len(order), bool)
        if not holding.any():
            return inline.get(self.pool.runners[0].evaluate_devices.remote(
                self.run_key, self.context_box, params_ref, batch, devices))
        pieces: dict[int, tuple[np.ndarray, np.ndarray]] = {}

        def keep(chunk, scores) -> None:  # one runner call's per-sample arrays, cut per device
            cuts = np.cumsum(sizes[chunk])[:-1]
            pieces.update(zip(np.asarray(chunk).tolist(), zip(np.split(scores[0], cuts), np.split(scores[1], cuts))))

        shared = order[~holding]
        if len(shared):
            keep(shared, inline.get(self.pool.runners[0].evaluate_devices.remote(
                self.run_key, self.context_box, params_ref, batch, shared)))
        own = order[holding & (sizes[order] > 0)].tolist()
        # each chunk under 64 MiB of state, fetched from the store as it is sent
        chunks = self._spread(own, cap=(64 << 20) // (4 * how.width))
        for chunk, scores in zip(chunks, self.pool.map_ordered(chunks, lambda runner, chunk: (
                runner.evaluate_personal.remote(self.run_key, self.context_box, params_ref, batch, chunk,
                                                [self.algorithm.own_state(d) for d in chunk], how.mask)))):
            keep(chunk, scores)
        scored = [pieces[int(d)] for d in order if sizes[d] > 0]
        return (np.concatenate([p[0] for p in scored] or [np.zeros(0, np.float64)]),
                np.concatenate([p[1] for p in scored] or [np.zeros(0, bool)]))

    def _spread(self, items: list, cap: int | None = None) -> list[list]:
        """`items` cut into about four chunks a runner (at most `cap` items each), for pool.map_ordered."""
        size = max(1, -(-len(items) // (4 * len(self.pool.runners))))
        size = max(1, min(size, cap)) if cap is not None else size
        return [items[i:i + size] for i in range(0, len(items), size)]

    def _finetune(self, r: int, spec, devices: np.ndarray) -> list[tuple[int, int, float]]:
        """Fine-tune, then evaluate, `devices` on the runners (chunks spread over them): per device, its
        (local test samples, correct, loss sum). Each device's seed is (seed, finetune, round, device)."""
        seed = self.scenario.seed
        jobs = [DeviceJob(self.run_key, int(d), spec, torch_seed(seed, "finetune", r, int(d))) for d in devices]
        chunks = self._spread(jobs)
        params_ref, batch = self.pool.put(self.params), self.scenario.evaluation.batch_size
        scores = []
        for chunk in self.pool.map_ordered(chunks, lambda runner, chunk: runner.finetune_evaluate.remote(
                self.context_box, params_ref, chunk, batch)):
            scores.extend(chunk)
        return scores

    def get_params(self) -> np.ndarray:
        return self.params


# Rounds run one at a time; participation_after answers beside them (see there).
ServerActor = ray.remote(concurrency_groups={"report": 1})(FederatedServer)
