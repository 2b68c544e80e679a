"""`text_observation_env:TextObservation-v0`: CartPole whose observations are Text, a space
with no fixed-size vector form, which the env factory must refuse."""

import gymnasium


class TextObservation(gymnasium.ObservationWrapper):
    def __init__(self):
        super().__init__(gymnasium.make("CartPole-v1"))
        self.observation_space = gymnasium.spaces.Text(max_length=8)

    def observation(self, observation):
        return "cartpole"


gymnasium.register(id="TextObservation-v0", entry_point=TextObservation)
