"""What both runtimes share on the host: request types, the ModelRuntime interface, packing,
completion validation and observation. Host side: no torch, no triton."""
