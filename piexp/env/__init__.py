"""The Pi workspace environment on tinker-cookbook: tools, reward, prompt, episodes, datasets."""
