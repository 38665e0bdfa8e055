"""The uplink: what happens to a device's report between its training and the aggregate. Client-level DP
(`privacy.py`) and its accountant (`accounting.py`), upload encoders (`compression.py`), SecAgg's cost model
(`secagg.py`), and the pipeline that applies them per report (`pipeline.py`). Pure functions and small
stateful objects; the simulated clock prices them through the system model.
"""
