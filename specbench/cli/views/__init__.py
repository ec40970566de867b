"""What the commands print: the tables, the per-command views, progress. Imports asked only."""
