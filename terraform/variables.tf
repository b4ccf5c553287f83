# Inputs of the GPU inference fleet module. The policy values (thresholds, schedules, group bounds, metric
# names) are meant to come from `fleet terraform export`, so that the alarms and the service read one config.

# ---------------------------------------------------------------------------------------------------------
# Naming and identity
# ---------------------------------------------------------------------------------------------------------

variable "name" {
  type        = string
  description = "Name of the fleet group; prefixes every resource this module creates (scaling group, alarms, role)."

  validation {
    condition     = can(regex("^[A-Za-z0-9][A-Za-z0-9_.-]{1,39}$", var.name))
    error_message = "name must be 2-40 characters of letters, digits, '.', '_' or '-', starting with a letter or digit."
  }
}

variable "account_id" {
  type        = string
  description = "Alibaba Cloud account id; custom metrics of the node agent live in namespace acs_customMetric_<account_id>."

  validation {
    condition     = can(regex("^[0-9]{6,20}$", var.account_id))
    error_message = "account_id must be the numeric Alibaba Cloud account id."
  }
}

variable "tags" {
  type        = map(string)
  description = "Tags applied to every taggable resource."
  nullable    = false
  default     = {}
}

# ---------------------------------------------------------------------------------------------------------
# CloudMonitor alarms
# ---------------------------------------------------------------------------------------------------------

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
  nullable    = false

  # Thresholds: 85 C and 95 % GPU memory from the isolation rules (issue 3: vLLM pre-allocates 90 % of every
  # GPU, so a healthy engine reads 90-93 % used and the rule reads "over 90 %" as beyond that reservation);
  # the queue depth and instance down from issue 8. Latency pages on P99 TTFT (2 s) and TPOT (100 ms, 10 tokens/s), which do not grow with the
  # answer's length; an end-to-end P99 would page on every long answer. The durations mirror the isolation
  # rules (2 min, 5 min).
  default = {
    gpu_temperature = {
      metric     = "instance_gpu_gpu_temperature"
      statistics = "Maximum"
      threshold  = 85
      times      = 2
    }
    gpu_memory = {
      metric    = "instance_gpu_memory_usedutilization"
      threshold = 95
      times     = 5
      level     = "warn"
    }
    ttft_p99 = {
      metric        = "vllm_ttft_p99_ms"
      custom_metric = true
      statistics    = "Maximum"
      threshold     = 2000
      times         = 3
    }
    tpot_p99 = {
      metric        = "vllm_tpot_p99_ms"
      custom_metric = true
      statistics    = "Maximum"
      threshold     = 100
      times         = 3
    }
    queue_depth = {
      metric        = "vllm_num_requests_waiting"
      custom_metric = true
      threshold     = 10
      times         = 5
      level         = "warn"
    }
    # The node agent's vllm_up is 1 while the local vLLM server answers; below 1 for a whole period means
    # it never answered. A VM that dies stops publishing altogether: the ESS health check replaces it.
    instance_down = {
      metric              = "vllm_up"
      custom_metric       = true
      statistics          = "Maximum"
      comparison_operator = "<"
      threshold           = 1
      times               = 2
    }
  }

  validation {
    condition     = alltrue([for a in values(var.alarms) : contains(["critical", "warn", "info"], a.level)])
    error_message = "alarms[*].level must be one of critical, warn, info."
  }
  validation {
    condition = alltrue([for a in values(var.alarms) : contains(
      [">", ">=", "<", "<=", "!=", "=="], a.comparison_operator
    )])
    error_message = "alarms[*].comparison_operator must be one of >, >=, <, <=, !=, ==."
  }
  validation {
    condition     = alltrue([for a in values(var.alarms) : contains(["Average", "Minimum", "Maximum"], a.statistics)])
    error_message = "alarms[*].statistics must be one of Average, Minimum, Maximum."
  }
  validation {
    # CloudMonitor periods are multiples of 15 s (GPU metrics are collected every 15 s).
    condition     = alltrue([for a in values(var.alarms) : a.period_s >= 15 && a.period_s % 15 == 0 && a.times >= 1])
    error_message = "alarms[*].period_s must be a positive multiple of 15 and times at least 1."
  }
  validation {
    condition     = alltrue([for a in values(var.alarms) : a.silence_time_s >= 300 && a.silence_time_s <= 86400])
    error_message = "alarms[*].silence_time_s must be within 300..86400 (the provider's range)."
  }
}

variable "alarm_metric_dimensions" {
  type        = string
  description = "Resources the alarm rules watch, as CloudMonitor's JSON list; the default watches every instance of the account."
  nullable    = false
  default     = "[{\"resource\":\"_ALL\"}]"

  validation {
    condition     = can(jsondecode(var.alarm_metric_dimensions))
    error_message = "alarm_metric_dimensions must be a JSON list such as [{\"instanceId\":\"i-...\"}]."
  }
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
  nullable    = false
  default     = {}

  validation {
    condition     = alltrue([for c in values(var.alarm_contacts) : contains(["en", "zh-cn"], c.lang)])
    error_message = "alarm_contacts[*].lang must be en or zh-cn."
  }
}

variable "existing_alarm_contacts" {
  type        = list(string)
  description = "Names of contacts that already exist in CloudMonitor and belong in the contact group."
  nullable    = false
  default     = []
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

# ---------------------------------------------------------------------------------------------------------
# ESS scaling group and scaling configuration
# ---------------------------------------------------------------------------------------------------------

variable "min_size" {
  type        = number
  description = "Smallest size of the scaling group (instances); the config's min_size."

  validation {
    condition     = var.min_size >= 0 && var.min_size <= 2000 && floor(var.min_size) == var.min_size
    error_message = "min_size must be a whole number within 0..2000."
  }
}

variable "max_size" {
  type        = number
  description = "Largest size of the scaling group (instances); the config's max_size."

  validation {
    condition     = var.max_size >= 0 && var.max_size <= 2000 && floor(var.max_size) == var.max_size
    error_message = "max_size must be a whole number within 0..2000."
  }
}

variable "desired_capacity" {
  type        = number
  description = "Initial desired capacity (enables ESS desired-capacity mode, which the service drives); null means min_size."
  default     = null
}

variable "default_cooldown_s" {
  type        = number
  description = "ESS default cooldown in seconds; it only delays alarm-triggered activities such as the backstop alarm."
  nullable    = false
  default     = 300
}

variable "vswitch_ids" {
  type        = list(string)
  description = "VSwitches the scaling group launches into (one per zone with GPU stock)."

  validation {
    condition     = length(var.vswitch_ids) >= 1
    error_message = "vswitch_ids needs at least one vswitch."
  }
}

variable "multi_az_policy" {
  type        = string
  description = "ESS multi-zone policy: PRIORITY tries the vswitches in order, BALANCE spreads across zones."
  nullable    = false
  default     = "PRIORITY"

  validation {
    condition     = contains(["PRIORITY", "BALANCE", "COST_OPTIMIZED", "COMPOSABLE"], var.multi_az_policy)
    error_message = "multi_az_policy must be PRIORITY, BALANCE, COST_OPTIMIZED or COMPOSABLE."
  }
}

variable "scaling_policy" {
  type        = string
  description = "What scale-in does with instances: release them, or recycle (economical mode: stopped, GPU unbilled)."
  nullable    = false
  default     = "release"

  validation {
    condition     = contains(["release", "recycle", "forceRelease", "forceRecycle"], var.scaling_policy)
    error_message = "scaling_policy must be release, recycle, forceRelease or forceRecycle."
  }
}

variable "removal_policies" {
  type        = list(string)
  description = "Which instances ESS removes first on its own scale-in (the service picks instances itself)."
  nullable    = false
  default     = ["OldestScalingConfiguration", "OldestInstance"]
}

variable "group_deletion_protection" {
  type        = bool
  description = "Refuse DeleteScalingGroup while set."
  nullable    = false
  default     = false
}

variable "loadbalancer_ids" {
  type        = list(string)
  description = "Classic Load Balancer (CLB) instances the group's instances join as backends; ESS sets a Standby instance's weight to 0."
  nullable    = false
  default     = []
}

variable "alb_server_groups" {
  type = list(object({
    id     = string
    port   = number
    weight = optional(number, 100)
  }))
  description = "ALB server groups the group's instances join (the vLLM port, the weight of a serving instance)."
  nullable    = false
  default     = []

  validation {
    condition     = alltrue([for g in var.alb_server_groups : g.port >= 1 && g.port <= 65535 && g.weight >= 0 && g.weight <= 100])
    error_message = "alb_server_groups[*].port must be within 1..65535 and weight within 0..100."
  }
}

variable "instance_types" {
  type        = list(string)
  description = "GPU instance types in order of preference (ESS falls back to the next one when a zone is out of stock)."
  nullable    = false
  default     = ["ecs.gn7i-c8g1.2xlarge"]

  validation {
    condition     = length(var.instance_types) >= 1 && length(var.instance_types) <= 10 && alltrue([for t in var.instance_types : startswith(t, "ecs.")])
    error_message = "instance_types needs 1..10 ECS instance types, each starting with \"ecs.\"."
  }
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
  nullable    = false
  default     = "cloud_essd"

  validation {
    condition     = contains(["cloud", "ephemeral_ssd", "cloud_ssd", "cloud_essd", "cloud_efficiency", "cloud_essd_xc1"], var.system_disk_category)
    error_message = "system_disk_category must be one of cloud, ephemeral_ssd, cloud_ssd, cloud_essd, cloud_efficiency, cloud_essd_xc1."
  }
}

variable "system_disk_size_gib" {
  type        = number
  description = "System disk size in GiB (room for the image and model weights)."
  nullable    = false
  default     = 200

  validation {
    condition     = var.system_disk_size_gib >= 20 && var.system_disk_size_gib <= 500
    error_message = "system_disk_size_gib must be within 20..500 (the provider's range)."
  }
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

# ---------------------------------------------------------------------------------------------------------
# Scaling rules, scheduled tasks, backstop alarm, lifecycle hook
# ---------------------------------------------------------------------------------------------------------

variable "scaling_rules" {
  type = map(object({
    adjustment_type  = optional(string, "QuantityChangeInCapacity")
    adjustment_value = number
    cooldown_s       = optional(number)
  }))
  description = "Simple scaling rules, keyed by name, for the backstop alarm and for operators; the service itself scales with ScaleWithAdjustment."
  nullable    = false
  default = {
    scale_out = { adjustment_value = 1 }
    scale_in  = { adjustment_value = -1 }
  }

  validation {
    condition = alltrue([for r in values(var.scaling_rules) : contains(
      ["QuantityChangeInCapacity", "PercentChangeInCapacity", "TotalCapacity"], r.adjustment_type
    )])
    error_message = "scaling_rules[*].adjustment_type must be QuantityChangeInCapacity, PercentChangeInCapacity or TotalCapacity."
  }
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
  nullable    = false
  default     = {}

  validation {
    condition     = alltrue([for t in values(var.scheduled_tasks) : contains(["Daily", "Weekly", "Monthly", "Cron"], t.recurrence_type)])
    error_message = "scheduled_tasks[*].recurrence_type must be Daily, Weekly, Monthly or Cron."
  }
  validation {
    condition     = alltrue([for t in values(var.scheduled_tasks) : can(regex("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}Z$", t.launch_time))])
    error_message = "scheduled_tasks[*].launch_time must be UTC in the form YYYY-MM-DDThh:mmZ."
  }
  validation {
    condition     = alltrue([for t in values(var.scheduled_tasks) : t.launch_expiration_time_s >= 0 && t.launch_expiration_time_s <= 1800])
    error_message = "scheduled_tasks[*].launch_expiration_time_s must be within 0..1800."
  }
}

variable "scheduled_task_name_prefix" {
  type        = string
  description = "Prefix of the scheduled task names; keep it different from the service's own mirroring prefix so neither owner touches the other's tasks."
  nullable    = false
  default     = "tf-floor-"
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
  nullable    = false
  default     = {}

  validation {
    condition     = contains([60, 120, 300, 900], var.backstop_alarm.period_s)
    error_message = "backstop_alarm.period_s must be 60, 120, 300 or 900 (the ESS alarm periods)."
  }
  validation {
    condition     = contains(["Average", "Minimum", "Maximum"], var.backstop_alarm.statistics)
    error_message = "backstop_alarm.statistics must be Average, Minimum or Maximum."
  }
  validation {
    condition     = contains([">", ">=", "<", "<="], var.backstop_alarm.comparison_operator)
    error_message = "backstop_alarm.comparison_operator must be >, >=, < or <=."
  }
}

variable "drain_timeout_s" {
  type        = number
  description = "How long a scale-in waits in Removing:Wait for the service to drain the instance (the lifecycle hook's heartbeat timeout)."
  nullable    = false
  default     = 300

  validation {
    condition     = var.drain_timeout_s >= 30 && var.drain_timeout_s <= 21600
    error_message = "drain_timeout_s must be within 30..21600 (the ESS heartbeat timeout range)."
  }
}

variable "drain_notification_arn" {
  type        = string
  description = "Where ESS announces a pending scale-in (an MNS queue or topic ARN); null means the service polls for Removing:Wait."
  default     = null
}

# ---------------------------------------------------------------------------------------------------------
# The service's RAM role
# ---------------------------------------------------------------------------------------------------------

variable "service_role_name" {
  type        = string
  description = "Name of the RAM role the fleet service assumes; null means \"<name>-fleet-service\" (with any '_' or '.' of name as '-')."
  default     = null

  validation {
    condition     = var.service_role_name == null || can(regex("^[A-Za-z0-9.-]{1,64}$", var.service_role_name))
    error_message = "service_role_name must be 1-64 letters, digits, '.' or '-' (what RAM accepts in a role name)."
  }
}

variable "service_trusted_services" {
  type        = list(string)
  description = "Cloud services allowed to assume the service role (ecs.aliyuncs.com when the service runs on ECS with an instance role)."
  nullable    = false
  default     = ["ecs.aliyuncs.com"]
}

variable "service_trusted_ram_arns" {
  type        = list(string)
  description = "RAM users or roles (ARNs) allowed to assume the service role, e.g. for a service running outside ECS."
  nullable    = false
  default     = []
}

variable "service_role_max_session_duration_s" {
  type        = number
  description = "Longest STS session of the service role, in seconds."
  nullable    = false
  default     = 3600

  validation {
    condition     = var.service_role_max_session_duration_s >= 3600 && var.service_role_max_session_duration_s <= 43200
    error_message = "service_role_max_session_duration_s must be within 3600..43200."
  }
}

# ---------------------------------------------------------------------------------------------------------
# Spot capacity (fleet.yaml capacity_mix; ESS CreateScalingGroup / CreateScalingConfiguration)
# ---------------------------------------------------------------------------------------------------------

variable "on_demand_base_capacity" {
  type        = number
  description = "Instances that are always on-demand (COST_OPTIMIZED groups); null: ESS's default."
  default     = null
}

variable "on_demand_percentage_above_base_capacity" {
  type        = number
  description = "Share (0-100) of the instances above the base that is on-demand; the rest is spot."
  default     = null

  validation {
    condition     = var.on_demand_percentage_above_base_capacity == null ? true : (var.on_demand_percentage_above_base_capacity >= 0 && var.on_demand_percentage_above_base_capacity <= 100)
    error_message = "on_demand_percentage_above_base_capacity must be within 0-100."
  }
}

variable "spot_instance_pools" {
  type        = number
  description = "How many of the cheapest instance types spot instances are spread over."
  default     = null
}

variable "spot_instance_remedy" {
  type        = bool
  description = "Replace a spot instance as soon as its reclaim is announced."
  default     = null
}

variable "compensate_with_on_demand" {
  type        = bool
  description = "Create on-demand instances when spot ones cannot be had."
  default     = null
}

variable "spot_strategy" {
  type        = string
  description = "NoSpot, SpotWithPriceLimit (with spot_price_limit) or SpotAsPriceGo."
  nullable    = false
  default     = "NoSpot"

  validation {
    condition     = contains(["NoSpot", "SpotWithPriceLimit", "SpotAsPriceGo"], var.spot_strategy)
    error_message = "spot_strategy must be NoSpot, SpotWithPriceLimit or SpotAsPriceGo."
  }
}

variable "spot_price_limit" {
  type        = number
  description = "The highest CNY per hour paid for one spot instance, applied to every instance type."
  default     = null
}
