# A new service: a tagged database, a bucket, and a security group open to the VPC only.
locals {
  tags = { owner = "payments", "cost-center" = "cc-1234" }
}

resource "aws_db_instance" "orders" {
  identifier        = "orders"
  engine            = "postgres"
  instance_class    = "db.t4g.micro"
  allocated_storage = 20
  tags              = local.tags
}

resource "aws_s3_bucket" "invoices" {
  bucket = "payments-invoices"
  tags   = local.tags
}

resource "aws_security_group" "orders_db" {
  name = "orders-db"
  ingress {
    from_port   = 5432
    to_port     = 5432
    protocol    = "tcp"
    cidr_blocks = ["10.0.0.0/8"]
  }
  tags = local.tags
}
