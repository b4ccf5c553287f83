"""The faked ECS (2014-05-26): instances, their states and system events, and the GPU instance types."""
