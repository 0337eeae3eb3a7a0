locals {
  tags = { owner = "payments", "cost-center" = "cc-1234" }
}

resource "aws_db_instance" "orders" {
  identifier     = "orders"
  engine         = "postgres"
  instance_class = "db.t4g.micro"
  tags           = local.tags
}

resource "aws_s3_bucket" "invoices" {
  bucket = "payments-invoices"
  tags   = local.tags
}
