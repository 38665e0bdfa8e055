"""The model zoo, built by registered name: vision models (`zoo.py`: logreg, mlp, the papers' CNNs, ResNet-18)
and LEAF's character LSTM (`text.py`).
"""
