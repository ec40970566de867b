"""The measurement layer: timers, the benchmark of one configuration, the roofline, the machine
and its load, the peers timed beside specbench, and the exactness self-test. Imports the model
layer only."""
