resource "aws_s3_bucket" "logs" {
  bucket = "ops-logs"
  tags   = { owner = "ops", "cost-center" = "cc-3000" }
}
