"""Tests of what ships beside the operator: the Helm chart, the image, the dashboard and the docs."""
