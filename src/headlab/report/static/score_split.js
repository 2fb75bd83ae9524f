// headlab displays: the score split of why a head attends (see displays.js).
