// placeholder until the trainer lands
int main() { return 0; }
