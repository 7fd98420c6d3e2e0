"""Share-partition state and the share-group configs (KIP-932)."""
