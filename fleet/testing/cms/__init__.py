"""The faked CloudMonitor (CMS 2019-01-01): metric data, custom metrics, resource metric rules, alert logs."""
