"""What the user asked for: the flags and their types, the help texts, the one options object
(Settings) and its checks, the prompts and the paths chosen. Imports no other wing of cli/."""
