"""The bundled controller: group objects for every backend, and gang release for the gate backend."""
