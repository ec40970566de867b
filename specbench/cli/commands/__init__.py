"""The commands and their plans: from the options to the checked jobs, the models loaded, the
battery, the runs over several processes. Imports asked and views."""
