// placeholder: filled by issue 5 work
int main() { return 2; }
