"""The simulated GPU fleet: instances that boot, serve with continuous batching, heat up and fail."""
