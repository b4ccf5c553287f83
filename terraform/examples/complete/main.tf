# The whole module for one GPU group. Infrastructure values (network, image) come from terraform.tfvars; the
# policy values (thresholds, schedules, bounds) from `fleet terraform export`, written next to it as
# fleet.auto.tfvars.json, which Terraform loads automatically.

provider "alicloud" {
  region = var.region
}

module "fleet" {
  source = "../.."

  name       = var.name
  account_id = var.account_id
  tags       = var.tags

  alarms                   = var.alarms
  alarm_metric_dimensions  = var.alarm_metric_dimensions
  alarm_contact_group_name = var.alarm_contact_group_name
  alarm_contacts           = var.alarm_contacts
  existing_alarm_contacts  = var.existing_alarm_contacts
  chat_robot_webhook_url   = var.chat_robot_webhook_url
  service_webhook_url      = var.service_webhook_url

  min_size                  = var.min_size
  max_size                  = var.max_size
  desired_capacity          = var.desired_capacity
  default_cooldown_s        = var.default_cooldown_s
  vswitch_ids               = var.vswitch_ids
  multi_az_policy           = var.multi_az_policy
  scaling_policy            = var.scaling_policy
  group_deletion_protection = var.group_deletion_protection
  loadbalancer_ids          = var.loadbalancer_ids
  alb_server_groups         = var.alb_server_groups

  on_demand_base_capacity                  = var.on_demand_base_capacity
  on_demand_percentage_above_base_capacity = var.on_demand_percentage_above_base_capacity
  spot_instance_pools                      = var.spot_instance_pools
  spot_instance_remedy                     = var.spot_instance_remedy
  compensate_with_on_demand                = var.compensate_with_on_demand
  spot_strategy                            = var.spot_strategy
  spot_price_limit                         = var.spot_price_limit

  instance_types         = var.instance_types
  image_id               = var.image_id
  security_group_ids     = var.security_group_ids
  system_disk_category   = var.system_disk_category
  system_disk_size_gib   = var.system_disk_size_gib
  instance_ram_role_name = var.instance_ram_role_name
  key_name               = var.key_name
  user_data              = var.user_data

  scaling_rules              = var.scaling_rules
  scheduled_tasks            = var.scheduled_tasks
  scheduled_task_name_prefix = var.scheduled_task_name_prefix
  backstop_alarm             = var.backstop_alarm
  drain_timeout_s            = var.drain_timeout_s

  service_trusted_services = var.service_trusted_services
}

output "scaling_group_id" {
  description = "Put this into fleet.yaml as the group's scaling_group_id."
  value       = module.fleet.scaling_group_id
}

output "service_role_arn" {
  description = "The role the fleet service assumes."
  value       = module.fleet.service_role_arn
}

output "alarm_ids" {
  description = "CloudMonitor alarm rules by key."
  value       = module.fleet.alarm_ids
}
