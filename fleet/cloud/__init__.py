"""Adapters over the official Alibaba Cloud SDKs (ESS, CMS, ECS): narrow, typed, retried."""
