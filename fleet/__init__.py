"""Fleet automation for LLM inference on Alibaba Cloud GPUs: the imperative shell (CLI, cloud, service)."""

__version__ = "0.1.0"
