output "scaling_group_id" {
  description = "ID of the ESS scaling group; the service's scaling_group_id in fleet.yaml."
  value       = alicloud_ess_scaling_group.this.id
}

output "scaling_configuration_id" {
  description = "ID of the GPU scaling configuration."
  value       = alicloud_ess_scaling_configuration.this.id
}

output "scaling_rule_aris" {
  description = "ARIs of the scaling rules, by rule key (ExecuteScalingRule takes the ARI)."
  value       = { for k, r in alicloud_ess_scaling_rule.this : k => r.ari }
}

output "scheduled_task_ids" {
  description = "IDs of the scheduled floor tasks, by task key."
  value       = { for k, t in alicloud_ess_scheduled_task.this : k => t.id }
}

output "backstop_alarm_id" {
  description = "ID of the ESS backstop alarm task, or null when disabled."
  value       = one(alicloud_ess_alarm.backstop[*].id)
}

output "drain_lifecycle_hook_id" {
  description = "ID of the scale-in lifecycle hook the service completes after draining."
  value       = alicloud_ess_lifecycle_hook.drain.id
}

output "alarm_ids" {
  description = "IDs of the CloudMonitor alarm rules, by alarm key."
  value       = { for k, a in alicloud_cms_alarm.this : k => a.id }
}

output "alarm_contact_group_name" {
  description = "Name of the contact group the alarms notify."
  value       = alicloud_cms_alarm_contact_group.this.alarm_contact_group_name
}

output "custom_metric_namespace" {
  description = "CloudMonitor namespace of the node agent's custom metrics."
  value       = local.custom_metric_namespace
}

output "service_role_name" {
  description = "Name of the RAM role the fleet service assumes."
  value       = alicloud_ram_role.service.role_name
}

output "service_role_arn" {
  description = "ARN of the RAM role the fleet service assumes."
  value       = alicloud_ram_role.service.arn
}

output "service_actions" {
  description = "The API Actions granted to the service role."
  value       = local.service_actions
}
