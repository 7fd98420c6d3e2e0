"""Share groups (KIP-932): members, epochs, session timeouts and the server-side assignment."""
