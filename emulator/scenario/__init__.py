"""The scenario: one YAML file that fixes a whole experiment, described by a strict schema (pydantic v2,
unknown keys refused everywhere, so a typo never falls back to a default).

The frame lives here: the root model (`root.py`), the sections every run has (`data.py`, `training.py`,
`population.py`, `execution.py`, `uplink.py`), reading YAML and `--set` overrides (`loading.py`), and
errors that name the YAML path of each problem (`base.py`, `describe.py`). A registered part's own config
(an algorithm's, an availability model's...) lives beside the part's code and is found through the
registry by its tag. The schema describes, it never loads: the entry points register the parts first
(emulator/parts/loading.py), and the checks that need the system model run from emulator/system/checks.py.
"""
from emulator.scenario.base import ScenarioError, ScenarioFieldError, Strict
from emulator.scenario.data import (
                                    DataConfig,
                                    DatasetOptions,
                                    ModelConfig,
                                    Partition,
                                    PartitionSettings,
                                    ServerSetConfig,
                                    SyntheticConfig,
)
from emulator.scenario.execution import EvaluationConfig, OutputConfig, RuntimeConfig
from emulator.scenario.loading import (
                                    APPEND,
                                    apply_overrides,
                                    dump_scenario,
                                    parse_override,
                                    parse_scenario,
                                    read_yaml,
                                    with_plugins,
)
from emulator.scenario.population import (
                                    BEHAVIOURS,
                                    GROUP_STATISTICS,
                                    RANKED_BEHAVIOURS,
                                    SCALED_BEHAVIOURS,
                                    STATISTICS,
                                    TYPE_BEHAVIOURS,
                                    Availability,
                                    AvailabilitySettings,
                                    ComputeTier,
                                    LognormalCompute,
                                    LognormalNetwork,
                                    NetworkTier,
                                    PopulationConfig,
                                    ServerProfile,
                                    SystemConfig,
                                    Tie,
                                    TieredCompute,
                                    TieredNetwork,
                                    TraceCompute,
                                    TraceNetwork,
                                    UserType,
)
from emulator.scenario.root import Scenario, dataset_classes, dataset_input_shape
from emulator.scenario.training import (
                                    AlgorithmConfig,
                                    AsynchronousTraining,
                                    ClientTraining,
                                    ConstantSchedule,
                                    CosineSchedule,
                                    ExponentialSchedule,
                                    LrSchedule,
                                    ScheduleSettings,
                                    Selection,
                                    SelectionSettings,
                                    ServerOptimizer,
                                    ServerOptimizerSettings,
                                    ServerTraining,
                                    StalenessSettings,
                                    StepSchedule,
                                    single_server_momentum,
)
from emulator.scenario.uplink import (
                                    AdaptiveClipping,
                                    Compression,
                                    FixedClipping,
                                    NoCompression,
                                    PrivacyConfig,
                                    QsgdCompression,
                                    SecureAggregationConfig,
                                    SignCompression,
                                    TopKCompression,
)
