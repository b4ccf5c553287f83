"""Dev tooling for the terraform/ module: ``hcl`` (the HCL subset parser and type checks), ``check`` (the
module against the alicloud provider schema) and ``export`` (fleet.yaml to the module's tfvars). Nothing in
the running service imports this package.
"""
