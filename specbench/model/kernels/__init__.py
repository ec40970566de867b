"""model/'s floor: the products the steps run on. specbench's CPU kernel (cpu, cpu_kernels.cc), the
fused Pallas kernels of a GPU step (pallas, its tiling and its layer), and how a program is
compiled per backend (programs). Imports nothing else of specbench.model."""
