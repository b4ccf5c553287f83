# The cloud side of one GPU inference group: CloudMonitor alarms and their contacts, the ESS scaling group with
# its GPU scaling configuration, rules, scheduled floors, backstop alarm and drain hook, and the RAM role the
# fleet service runs as. The provider is configured by the caller (examples/complete).

locals {
  custom_metric_namespace = "acs_customMetric_${var.account_id}"
  contact_group_name      = coalesce(var.alarm_contact_group_name, "${var.name}-oncall")
  # RAM refuses other characters in names: a role name takes letters, digits, '.' and '-', a policy name
  # letters, digits and '-' only; var.name may also hold '_' (and '.'), which become '-' here.
  ram_name            = replace(var.name, "/[^A-Za-z0-9-]/", "-")
  service_role_name   = coalesce(var.service_role_name, "${local.ram_name}-fleet-service")
  service_policy_name = "${replace(local.service_role_name, "/[^A-Za-z0-9-]/", "-")}-policy"
  robot_contact_name  = "${var.name}-robot"

  # Exactly the API Actions the service's code calls (fleet.cloud.permissions.SERVICE, which tests derive from
  # the source); tests/terraform keeps this list equal to it. Never add a wildcard.
  service_actions = [
    "cms:DescribeMetricLast",
    "cms:DescribeMetricList",
    "ecs:DescribeInstances",
    "ecs:DescribeInstancesFullStatus",
    "ecs:RebootInstance",
    "ess:CompleteLifecycleAction",
    "ess:CreateScheduledTask",
    "ess:DeleteScheduledTask",
    "ess:DescribeLifecycleActions",
    "ess:DescribeScalingActivities",
    "ess:DescribeScalingGroups",
    "ess:DescribeScalingInstances",
    "ess:DescribeScheduledTasks",
    "ess:EnterStandby",
    "ess:ExitStandby",
    "ess:ModifyScalingConfiguration",
    "ess:ModifyScalingGroup",
    "ess:ModifyScheduledTask",
    "ess:RemoveInstances",
    "ess:ScaleWithAdjustment",
  ]

  # What the node agent calls under the GPU instances' role (fleet.cloud.permissions.AGENT).
  node_agent_actions = ["cms:PutCustomMetric"]

  service_principal = merge(
    length(var.service_trusted_services) > 0 ? { Service = var.service_trusted_services } : {},
    length(var.service_trusted_ram_arns) > 0 ? { RAM = var.service_trusted_ram_arns } : {},
  )
}

# ---------------------------------------------------------------------------------------------------------
# CloudMonitor: contacts, the contact group, the alarm rules
# ---------------------------------------------------------------------------------------------------------

resource "alicloud_cms_alarm_contact" "this" {
  for_each = var.alarm_contacts

  alarm_contact_name     = each.key
  describe               = each.value.description
  channels_mail          = each.value.email
  channels_ding_web_hook = each.value.dingtalk_webhook
  lang                   = each.value.lang
}

# The chat robot receives every alarm of the group through the contact group (CloudMonitor posts to it).
resource "alicloud_cms_alarm_contact" "robot" {
  count = var.chat_robot_webhook_url == null ? 0 : 1

  alarm_contact_name     = local.robot_contact_name
  describe               = "Chat robot of the ${var.name} GPU fleet"
  channels_ding_web_hook = var.chat_robot_webhook_url
  lang                   = "en"
}

resource "alicloud_cms_alarm_contact_group" "this" {
  alarm_contact_group_name = local.contact_group_name
  describe                 = "On-call for the ${var.name} GPU inference fleet"
  contacts = concat(
    [for c in alicloud_cms_alarm_contact.this : c.alarm_contact_name],
    [for c in alicloud_cms_alarm_contact.robot : c.alarm_contact_name],
    var.existing_alarm_contacts,
  )
}

resource "alicloud_cms_alarm" "this" {
  for_each = var.alarms

  name               = "${var.name}-${each.key}"
  project            = each.value.custom_metric ? local.custom_metric_namespace : "acs_ecs_dashboard"
  metric             = each.value.metric
  metric_dimensions  = coalesce(each.value.metric_dimensions, var.alarm_metric_dimensions)
  period             = each.value.period_s
  silence_time       = each.value.silence_time_s
  effective_interval = each.value.effective_interval
  enabled            = each.value.enabled
  contact_groups     = [alicloud_cms_alarm_contact_group.this.alarm_contact_group_name]
  webhook            = var.service_webhook_url
  tags               = var.tags

  # One escalation level per rule, chosen by each.value.level.
  dynamic "escalations_critical" {
    for_each = each.value.level == "critical" ? [each.value] : []
    content {
      statistics          = escalations_critical.value.statistics
      comparison_operator = escalations_critical.value.comparison_operator
      threshold           = tostring(escalations_critical.value.threshold)
      times               = escalations_critical.value.times
    }
  }

  dynamic "escalations_warn" {
    for_each = each.value.level == "warn" ? [each.value] : []
    content {
      statistics          = escalations_warn.value.statistics
      comparison_operator = escalations_warn.value.comparison_operator
      threshold           = tostring(escalations_warn.value.threshold)
      times               = escalations_warn.value.times
    }
  }

  dynamic "escalations_info" {
    for_each = each.value.level == "info" ? [each.value] : []
    content {
      statistics          = escalations_info.value.statistics
      comparison_operator = escalations_info.value.comparison_operator
      threshold           = tostring(escalations_info.value.threshold)
      times               = escalations_info.value.times
    }
  }
}

# ---------------------------------------------------------------------------------------------------------
# ESS: the scaling group and its GPU scaling configuration
# ---------------------------------------------------------------------------------------------------------

resource "alicloud_ess_scaling_group" "this" {
  scaling_group_name        = var.name
  min_size                  = var.min_size
  max_size                  = var.max_size
  desired_capacity          = coalesce(var.desired_capacity, var.min_size)
  default_cooldown          = var.default_cooldown_s
  vswitch_ids               = var.vswitch_ids
  multi_az_policy           = var.multi_az_policy
  scaling_policy            = var.scaling_policy
  removal_policies          = var.removal_policies
  health_check_type         = "ECS"
  group_deletion_protection = var.group_deletion_protection
  tags                      = var.tags

  # Spot above an on-demand base (MultiAZPolicy COST_OPTIMIZED), replaced before reclaim, on-demand when
  # spot cannot be had (fleet.yaml capacity_mix).
  on_demand_base_capacity                  = var.on_demand_base_capacity
  on_demand_percentage_above_base_capacity = var.on_demand_percentage_above_base_capacity
  spot_instance_pools                      = var.spot_instance_pools
  spot_instance_remedy                     = var.spot_instance_remedy
  compensate_with_on_demand                = var.compensate_with_on_demand

  # The load balancers in front of vLLM. ESS adds each new instance as a backend and, while an instance is in
  # Standby (isolation), holds its weight at 0, so the balancer stops sending it requests; ExitStandby
  # restores the weight.
  loadbalancer_ids = var.loadbalancer_ids

  dynamic "alb_server_group" {
    for_each = var.alb_server_groups
    content {
      alb_server_group_id = alb_server_group.value.id
      port                = alb_server_group.value.port
      weight              = alb_server_group.value.weight
    }
  }

  lifecycle {
    # The service owns the running size: it moves desired capacity (and ESS scheduled tasks move min/max)
    # between applies, so Terraform sets the initial value only.
    ignore_changes = [desired_capacity]
  }
}

resource "alicloud_ess_scaling_configuration" "this" {
  scaling_group_id           = alicloud_ess_scaling_group.this.id
  scaling_configuration_name = "${var.name}-gpu"
  instance_types             = var.instance_types
  spot_strategy              = var.spot_strategy
  image_id                   = var.image_id
  security_group_ids         = var.security_group_ids
  system_disk_category       = var.system_disk_category
  system_disk_size           = var.system_disk_size_gib
  role_name                  = var.instance_ram_role_name
  key_name                   = var.key_name
  user_data                  = var.user_data
  instance_name              = "${var.name}-gpu"
  active                     = true
  enable                     = true
  force_delete               = true
  tags                       = var.tags

  dynamic "spot_price_limit" {
    for_each = var.spot_price_limit == null ? [] : var.instance_types
    content {
      instance_type = spot_price_limit.value
      price_limit   = var.spot_price_limit
    }
  }
}

# ---------------------------------------------------------------------------------------------------------
# ESS: scaling rules, scheduled floors, the backstop alarm, the drain hook
# ---------------------------------------------------------------------------------------------------------

resource "alicloud_ess_scaling_rule" "this" {
  for_each = var.scaling_rules

  scaling_group_id  = alicloud_ess_scaling_group.this.id
  scaling_rule_name = "${var.name}-${each.key}"
  scaling_rule_type = "SimpleScalingRule"
  adjustment_type   = each.value.adjustment_type
  adjustment_value  = each.value.adjustment_value
  cooldown          = each.value.cooldown_s
}

# Floors that hold while the service is down. The service mirrors the same schedules under its own name
# prefix; these carry scheduled_task_name_prefix so that neither owner edits the other's tasks.
resource "alicloud_ess_scheduled_task" "this" {
  for_each = var.scheduled_tasks

  scheduled_task_name    = "${var.scheduled_task_name_prefix}${each.key}"
  description            = coalesce(each.value.description, "Schedule floor of ${var.name} (terraform)")
  scaling_group_id       = alicloud_ess_scaling_group.this.id
  launch_time            = each.value.launch_time
  recurrence_type        = each.value.recurrence_type
  recurrence_value       = each.value.recurrence_value
  recurrence_end_time    = each.value.recurrence_end_time
  min_value              = each.value.min_value
  max_value              = each.value.max_value
  desired_capacity       = each.value.desired_capacity
  launch_expiration_time = each.value.launch_expiration_time_s
  task_enabled           = each.value.enabled
}

# Scales out on sustained GPU saturation when nothing else does (the service down or stuck). ESS cooldown
# applies to it, so it never fires twice within default_cooldown_s.
resource "alicloud_ess_alarm" "backstop" {
  count = var.backstop_alarm.enabled ? 1 : 0

  name                = "${var.name}-backstop"
  description         = "Scale out while the fleet service is not acting"
  scaling_group_id    = alicloud_ess_scaling_group.this.id
  metric_type         = "system"
  metric_name         = var.backstop_alarm.metric_name
  statistics          = var.backstop_alarm.statistics
  comparison_operator = var.backstop_alarm.comparison_operator
  threshold           = tostring(var.backstop_alarm.threshold)
  period              = var.backstop_alarm.period_s
  evaluation_count    = var.backstop_alarm.evaluation_count
  alarm_actions       = [alicloud_ess_scaling_rule.this[var.backstop_alarm.scaling_rule].ari]
  enable              = true
}

# Every scale-in waits in Removing:Wait so running requests can finish: the service watches the instance's
# running + waiting requests and completes the action (CompleteLifecycleAction, CONTINUE) once they reach 0;
# CONTINUE after the timeout, so a dead service never blocks scale-in for good.
resource "alicloud_ess_lifecycle_hook" "drain" {
  scaling_group_id      = alicloud_ess_scaling_group.this.id
  name                  = "${var.name}-drain"
  lifecycle_transition  = "SCALE_IN"
  default_result        = "CONTINUE"
  heartbeat_timeout     = var.drain_timeout_s
  notification_arn      = var.drain_notification_arn
  notification_metadata = jsonencode({ group = var.name, purpose = "drain" })
}

# ---------------------------------------------------------------------------------------------------------
# RAM: the role the fleet service runs as, allowed exactly the Actions it calls
# ---------------------------------------------------------------------------------------------------------

resource "alicloud_ram_role" "service" {
  role_name            = local.service_role_name
  description          = "Fleet service of ${var.name}: observes and scales the GPU group"
  max_session_duration = var.service_role_max_session_duration_s
  assume_role_policy_document = jsonencode({
    Version = "1"
    Statement = [{
      Action    = "sts:AssumeRole"
      Effect    = "Allow"
      Principal = local.service_principal
    }]
  })
  tags = var.tags
}

resource "alicloud_ram_policy" "service" {
  policy_name = local.service_policy_name
  description = "Exactly the API Actions the fleet service of ${var.name} calls"
  policy_document = jsonencode({
    Version = "1"
    Statement = [{
      Effect = "Allow"
      Action = local.service_actions
      # CMS and ECS describe calls do not support resource-level authorization, so resources stay "*";
      # the Action list is what confines the role.
      Resource = ["*"]
    }]
  })
  tags = var.tags
}

resource "alicloud_ram_role_policy_attachment" "service" {
  role_name   = alicloud_ram_role.service.role_name
  policy_name = alicloud_ram_policy.service.policy_name
  policy_type = "Custom"
}

# The node agent publishes its custom metrics under the GPU instances' own role (instance_ram_role_name, made
# outside this module): it is granted that Action alone, and the service role never publishes metrics.
resource "alicloud_ram_policy" "node_agent" {
  count = var.instance_ram_role_name == null ? 0 : 1

  policy_name = "${local.ram_name}-node-agent-policy"
  description = "Exactly the API Actions the node agent of ${var.name} calls"
  policy_document = jsonencode({
    Version = "1"
    Statement = [{
      Effect = "Allow"
      Action = local.node_agent_actions
      # CloudMonitor has no resource-level authorization: "*" is the only resource it accepts.
      Resource = ["*"]
    }]
  })
  tags = var.tags
}

resource "alicloud_ram_role_policy_attachment" "node_agent" {
  count = var.instance_ram_role_name == null ? 0 : 1

  role_name   = var.instance_ram_role_name
  policy_name = alicloud_ram_policy.node_agent[0].policy_name
  policy_type = "Custom"
}
