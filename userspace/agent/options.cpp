// placeholder: filled by issue 5 work
