"""Local servers (HTTP, S3, GCS, Azure) that the Python tests of the I/O datasets start on 127.0.0.1."""
