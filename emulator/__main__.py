from emulator.cli import entry

entry()
