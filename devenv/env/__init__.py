"""What an environment is, as plain data (L0): spec, names, labels, runtime reports, build context, local cache."""
