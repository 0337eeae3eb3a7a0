# The database block was removed (by mistake, or in a refactor without a `moved` block).
locals {
  tags = { owner = "payments", "cost-center" = "cc-1234" }
}

resource "aws_s3_bucket" "invoices" {
  bucket = "payments-invoices"
  tags   = local.tags
}
