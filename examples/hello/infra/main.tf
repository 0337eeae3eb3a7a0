variable "greeting" {
  type    = string
  default = "hello"
}

variable "replicas" {
  type    = number
  default = 1
}

resource "terraform_data" "app" {
  input = "${var.greeting}, world"
}

resource "terraform_data" "replica" {
  count = var.replicas
  input = "replica-${count.index}"
}

output "message" {
  value = terraform_data.app.output
}

output "replicas" {
  value = [for r in terraform_data.replica : r.output]
}
