"""The faked Auto Scaling (ESS 2022-02-22): groups, configurations, rules, scheduled tasks, alarms, lifecycle
hooks, scaling instances and activities."""
