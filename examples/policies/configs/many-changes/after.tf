# A count typed as 25 instead of 2.
resource "aws_instance" "worker" {
  count         = 25
  ami           = "ami-0abcdef1234567890"
  instance_type = "t3.micro"
  tags          = { owner = "batch", "cost-center" = "cc-4000" }
}
