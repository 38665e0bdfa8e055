"""What each device gets from the model: per-device scores on the devices' own test splits
(data.local_test) and the fleet statistics the literature reports of them (fleet.py). Pure numpy; the
server feeds it, the recorder writes what it returns."""
