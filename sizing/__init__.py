"""What to buy and how to run it: pure sizing of vLLM deployments on Alibaba Cloud GPUs."""
