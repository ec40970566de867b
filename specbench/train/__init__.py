"""Training the bundled pairs and EAGLE heads: data.py (corpus, windows, sampled softmax, greedy
text), loop.py (losses, optimizer, the loop, checkpoints), eagle.py and seq2seq.py (their tasks),
options.py and commands.py (the command line), __main__.py (its signal-safe entry).

Nothing is imported here: `python -m specbench.train` imports this package before __main__, which
must block SIGINT and SIGTERM before JAX starts a thread."""
