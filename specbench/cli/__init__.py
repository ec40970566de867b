"""The command line: options, plans checked before any work, the report battery, and what is
printed. Imports measure, results and model."""
