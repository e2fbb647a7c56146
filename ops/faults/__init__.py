"""Fault injection for the consistency suite: a catalogue of realistic bugs (`catalogue`), applied one at a time
to scratch copies of the tree and run against the suite (`run`); `python -m ops.faults` prints the kill rate."""
