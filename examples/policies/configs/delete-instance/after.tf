# Scaling down from two instances to one deletes a server, which holds no data: allowed.
# The volume gets bigger in place (an update, not a replacement): allowed too.
locals {
  tags = { owner = "web", "cost-center" = "cc-2000" }
}

resource "aws_instance" "web" {
  count         = 1
  ami           = "ami-0abcdef1234567890"
  instance_type = "t3.small"
  tags          = local.tags
}

resource "aws_ebs_volume" "cache" {
  availability_zone = "eu-west-1a"
  size              = 100
  tags              = local.tags
}
