"""What is on disk: the model registry and loading by name, the Hugging Face layouts of GPT-2 and
T5, downloads from the Hub, tokenizers, the draft vocabulary's ranking and EAGLE heads' folders."""
