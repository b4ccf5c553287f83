# Inputs of the complete example: the module's inputs passed through unchanged (same types), plus the region.
# Optional ones default to null here so that the module's own defaults apply (its variables are non-nullable).

variable "region" {
  type        = string
  description = "Region of the fleet, e.g. cn-chengdu (the config's region)."
}

variable "name" {
  type        = string
  description = "Name of the fleet group; prefixes every resource this module creates (scaling group, alarms, role)."
}

variable "account_id" {
  type        = string
  description = "Alibaba Cloud account id; custom metrics of the node agent live in namespace acs_customMetric_<account_id>."
}

variable "tags" {
  type        = map(string)
  description = "Tags applied to every taggable resource."
  default     = null
}

variable "alarms" {
  type = map(object({
    metric              = string
    custom_metric       = optional(bool, false)
    statistics          = optional(string, "Average")
    comparison_operator = optional(string, ">")
    threshold           = number
    times               = optional(number, 3)
    period_s            = optional(number, 60)
    level               = optional(string, "critical")
    silence_time_s      = optional(number, 3600)
    effective_interval  = optional(string, "00:00-23:59")
    enabled             = optional(bool, true)
    metric_dimensions   = optional(string)
  }))
  description = <<-EOT
    CloudMonitor alarm rules, keyed by a short name. metric is a CloudMonitor metric name: an acs_ecs_dashboard
    GPU metric, or (custom_metric = true) a custom metric of the node agent in acs_customMetric_<account_id>.
    The alarm fires when metric <comparison_operator> threshold holds for `times` consecutive periods of
    period_s seconds; level picks the escalation (critical, warn or info). metric_dimensions overrides
    alarm_metric_dimensions for this rule. Defaults follow issue 8 and the isolation rules of issue 3.
  EOT
  default     = null
}

variable "alarm_metric_dimensions" {
  type        = string
  description = "Resources the alarm rules watch, as CloudMonitor's JSON list; the default watches every instance of the account."
  default     = null
}

variable "alarm_contact_group_name" {
  type        = string
  description = "Name of the CloudMonitor contact group the alarms notify; null means \"<name>-oncall\"."
  default     = null
}

variable "alarm_contacts" {
  type = map(object({
    description      = string
    email            = optional(string)
    dingtalk_webhook = optional(string)
    lang             = optional(string, "en")
  }))
  description = "Alarm contacts to create and add to the contact group, keyed by contact name."
  default     = null
}

variable "existing_alarm_contacts" {
  type        = list(string)
  description = "Names of contacts that already exist in CloudMonitor and belong in the contact group."
  default     = null
}

variable "chat_robot_webhook_url" {
  type        = string
  description = "DingTalk-style chat robot webhook; when set, a contact \"<name>-robot\" with this webhook joins the contact group."
  default     = null
  sensitive   = true
}

variable "service_webhook_url" {
  type        = string
  description = "URL CloudMonitor POSTs every alarm of this module to (a relay to the fleet service or an incident tool); null for none."
  default     = null
}

variable "min_size" {
  type        = number
  description = "Smallest size of the scaling group (instances); the config's min_size."
}

variable "max_size" {
  type        = number
  description = "Largest size of the scaling group (instances); the config's max_size."
}

variable "desired_capacity" {
  type        = number
  description = "Initial desired capacity (enables ESS desired-capacity mode, which the service drives); null means min_size."
  default     = null
}

variable "default_cooldown_s" {
  type        = number
  description = "ESS default cooldown in seconds; it only delays alarm-triggered activities such as the backstop alarm."
  default     = null
}

variable "vswitch_ids" {
  type        = list(string)
  description = "VSwitches the scaling group launches into (one per zone with GPU stock)."
}

variable "multi_az_policy" {
  type        = string
  description = "ESS multi-zone policy: PRIORITY tries the vswitches in order, BALANCE spreads across zones."
  default     = null
}

variable "scaling_policy" {
  type        = string
  description = "What scale-in does with instances: release them, or recycle (economical mode: stopped, GPU unbilled)."
  default     = null
}

variable "group_deletion_protection" {
  type        = bool
  description = "Refuse DeleteScalingGroup while set."
  default     = null
}

variable "loadbalancer_ids" {
  type        = list(string)
  description = "Classic Load Balancer (CLB) instances the group's instances join as backends; ESS sets a Standby instance's weight to 0."
  default     = null
}

variable "alb_server_groups" {
  type = list(object({
    id     = string
    port   = number
    weight = optional(number, 100)
  }))
  description = "ALB server groups the group's instances join (the vLLM port, the weight of a serving instance)."
  default     = null
}

variable "instance_types" {
  type        = list(string)
  description = "GPU instance types in order of preference (ESS falls back to the next one when a zone is out of stock)."
  default     = null
}

variable "image_id" {
  type        = string
  description = "Image the GPU instances boot (GPU driver, vLLM and the node agent installed)."
}

variable "security_group_ids" {
  type        = list(string)
  description = "Security groups of the GPU instances."
}

variable "system_disk_category" {
  type        = string
  description = "System disk category of the GPU instances."
  default     = null
}

variable "system_disk_size_gib" {
  type        = number
  description = "System disk size in GiB (room for the image and model weights)."
  default     = null
}

variable "instance_ram_role_name" {
  type        = string
  description = "RAM role attached to the GPU instances; the module grants it cms:PutCustomMetric (the node agent). null for none."
  default     = null
}

variable "key_name" {
  type        = string
  description = "SSH key pair of the GPU instances; null for none."
  default     = null
}

variable "user_data" {
  type        = string
  description = "User data (cloud-init) of the GPU instances; null for none."
  default     = null
}

variable "scaling_rules" {
  type = map(object({
    adjustment_type  = optional(string, "QuantityChangeInCapacity")
    adjustment_value = number
    cooldown_s       = optional(number)
  }))
  description = "Simple scaling rules, keyed by name, for the backstop alarm and for operators; the service itself scales with ScaleWithAdjustment."
  default     = null
}

variable "scheduled_tasks" {
  type = map(object({
    launch_time              = string
    recurrence_type          = string
    recurrence_value         = string
    recurrence_end_time      = optional(string)
    min_value                = optional(number)
    max_value                = optional(number)
    desired_capacity         = optional(number)
    launch_expiration_time_s = optional(number, 600)
    enabled                  = optional(bool, true)
    description              = optional(string)
  }))
  description = <<-EOT
    ESS scheduled tasks holding the schedule floors while the service is down, keyed by task name suffix.
    Times are UTC (launch_time "YYYY-MM-DDThh:mmZ", at most 90 days ahead); Weekly recurrence values are
    days 0-6 with 0 = Sunday. `fleet terraform export` writes these from the config's schedules, already
    moved early by the group's cold start.
  EOT
  default     = null
}

variable "scheduled_task_name_prefix" {
  type        = string
  description = "Prefix of the scheduled task names; keep it different from the service's own mirroring prefix so neither owner touches the other's tasks."
  default     = null
}

variable "backstop_alarm" {
  type = object({
    metric_name         = optional(string, "GpuUtilizationAgent")
    statistics          = optional(string, "Average")
    comparison_operator = optional(string, ">=")
    threshold           = optional(number, 95)
    period_s            = optional(number, 300)
    evaluation_count    = optional(number, 3)
    scaling_rule        = optional(string, "scale_out")
    enabled             = optional(bool, false)
  })
  description = <<-EOT
    ESS event-triggered task that scales out while the service is down: GPU utilization (an ESS system metric,
    the same CloudMonitor agent reading as instance_gpu_gpu_usedutilization) held above the threshold for
    evaluation_count periods fires scaling_rule. Off by default: vLLM keeps the GPU busy well below its
    capacity (95 % utilization at ~40 % load), so the alarm fires on a healthy fleet and undoes the service's
    scale-in. Enable it only as a last resort, with a threshold above the service's own triggers.
  EOT
  default     = null
}

variable "drain_timeout_s" {
  type        = number
  description = "How long a scale-in waits in Removing:Wait for the service to drain the instance (the lifecycle hook's heartbeat timeout)."
  default     = null
}

variable "service_trusted_services" {
  type        = list(string)
  description = "Cloud services allowed to assume the service role (ecs.aliyuncs.com when the service runs on ECS with an instance role)."
  default     = null
}

variable "on_demand_base_capacity" {
  type        = number
  description = "Instances that are always on-demand."
  default     = null
}

variable "on_demand_percentage_above_base_capacity" {
  type        = number
  description = "Share (0-100) of the instances above the base that is on-demand."
  default     = null
}

variable "spot_instance_pools" {
  type        = number
  description = "How many of the cheapest types spot is spread over."
  default     = null
}

variable "spot_instance_remedy" {
  type        = bool
  description = "Replace a spot instance as soon as its reclaim is announced."
  default     = null
}

variable "compensate_with_on_demand" {
  type        = bool
  description = "On-demand instances when spot cannot be had."
  default     = null
}

variable "spot_strategy" {
  type        = string
  description = "NoSpot, SpotWithPriceLimit or SpotAsPriceGo."
  default     = null
}

variable "spot_price_limit" {
  type        = number
  description = "The highest CNY per hour paid for one spot instance."
  default     = null
}
