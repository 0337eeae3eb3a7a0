# A new queue worker without any tags, and an update that drops the cost centre from a bucket.
resource "aws_instance" "queue" {
  ami           = "ami-0abcdef1234567890"
  instance_type = "t3.micro"
}

resource "aws_s3_bucket" "logs" {
  bucket = "ops-logs"
  tags   = { owner = "ops" }
}
