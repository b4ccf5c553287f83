"""The node agent: GPU health (NVML) and vLLM metrics from each instance into CloudMonitor."""
