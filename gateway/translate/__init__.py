"""Translation between wire APIs: one module per direction, composed through chat."""
