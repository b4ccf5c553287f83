# The module never configures the provider: callers (see examples/complete) do.
# 1.3 for optional() object attributes with defaults; provider 1.252.0 for ram_role.role_name and
# assume_role_policy_document (the arguments that replaced name/document in that release).
terraform {
  required_version = ">= 1.3.0"

  required_providers {
    alicloud = {
      source  = "aliyun/alicloud"
      version = ">= 1.252.0, < 2.0.0"
    }
  }
}
