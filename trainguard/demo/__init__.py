"""The demo: a real PyTorch (CPU, gloo) training job supervised through injected faults."""
