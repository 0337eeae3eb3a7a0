locals {
  tags = { owner = "web", "cost-center" = "cc-2000" }
}

resource "aws_instance" "web" {
  count         = 2
  ami           = "ami-0abcdef1234567890"
  instance_type = "t3.small"
  tags          = local.tags
}

resource "aws_ebs_volume" "cache" {
  availability_zone = "eu-west-1a"
  size              = 50
  tags              = local.tags
}
