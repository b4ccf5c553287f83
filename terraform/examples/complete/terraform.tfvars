# Infrastructure of the example group. Replace the ids with your own; the policy values (bounds, thresholds,
# schedules) come from `fleet terraform export --config fleet.yaml -o fleet.auto.tfvars.json`.
region     = "cn-chengdu"
name       = "chat-7b"
account_id = "1234567890"

vswitch_ids        = ["vsw-example-zone-a", "vsw-example-zone-b"]
security_group_ids = ["sg-example"]
image_id           = "m-example-vllm-gpu"
instance_types     = ["ecs.gn7i-c8g1.2xlarge", "ecs.gn7i-c16g1.4xlarge"]

instance_ram_role_name = "chat-7b-node-agent"
service_webhook_url    = "https://fleet.example.internal/alarms/cms"

alarm_contacts = {
  oncall-sre = {
    description = "SRE on call"
    email       = "sre-oncall@example.com"
  }
}

tags = {
  team = "inference"
}

# Used when no fleet.auto.tfvars.json has been exported yet.
min_size = 2
max_size = 20

# The ALB server group in front of vLLM: ESS adds each instance on port 8000 and sets a Standby one's weight to 0.
alb_server_groups = [{ id = "sgp-example-vllm", port = 8000 }]
