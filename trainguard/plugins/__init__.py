"""Built-in plugins: classifiers, the recovery ladder and notifiers, registered like any other."""
