"""kubesim: a Kubernetes API simulator with a fake cluster and fault injection."""
