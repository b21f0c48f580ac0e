//! `RandomHorizontalFlip`, `RandomVerticalFlip` and `RandomApply`: a coin, then a fixed step.

use std::sync::Arc;

use super::{check_p, unkeyed};
use crate::{Compose, Error, HFlip, Item, Key, Params, RandomParams, Transform, VFlip, Value};

macro_rules! random_flip {
    ($name:ident, $flip:expr, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Clone, Copy)]
        pub struct $name {
            p: f64,
        }

        impl $name {
            /// The flip with probability `p`.
            ///
            /// # Errors
            /// `p` outside `[0, 1]`.
            pub fn new(p: f64) -> Result<$name, Error> {
                Ok($name {
                    p: check_p(stringify!($name), p)?,
                })
            }

            /// Whether the item of `key` is flipped.
            #[must_use]
            pub fn draw(&self, key: Key) -> bool {
                key.rng().chance(self.p)
            }
        }

        impl Transform for $name {
            fn apply(&self, index: u64, item: Item) -> Result<Item, Error> {
                self.apply_keyed(unkeyed(index), item)
            }

            fn apply_keyed(&self, key: Key, item: Item) -> Result<Item, Error> {
                let im = item.into_image(stringify!($name))?;
                Ok(Item::Image(if self.draw(key) {
                    $flip.flip(im)
                } else {
                    im
                }))
            }
        }

        impl RandomParams for $name {
            fn params(&self, key: Key, _height: usize, _width: usize) -> Result<Params, Error> {
                Ok(Params(vec![("flip", Value::Bool(self.draw(key)))]))
            }
        }
    };
}

random_flip!(
    RandomHorizontalFlip,
    HFlip,
    "torchvision's `RandomHorizontalFlip(p=0.5)`: mirrored left to right with probability `p`. Any dtype and layout."
);
random_flip!(
    RandomVerticalFlip,
    VFlip,
    "torchvision's `RandomVerticalFlip(p=0.5)`: mirrored top to bottom with probability `p`. Any dtype and layout."
);

/// torchvision's `RandomApply(transforms, p=0.5)`: the steps, in order, with probability `p`
/// (one coin for all). The steps draw as the steps of a [`Compose`] given the same key.
#[derive(Debug)]
pub struct RandomApply {
    steps: Compose,
    p: f64,
}

impl RandomApply {
    /// `steps` applied together with probability `p`.
    ///
    /// # Errors
    /// No step, or `p` outside `[0, 1]`.
    pub fn new(steps: Vec<Arc<dyn Transform>>, p: f64) -> Result<RandomApply, Error> {
        if steps.is_empty() {
            return Err(Error::arg("RandomApply", "pass at least one transform"));
        }
        Ok(RandomApply {
            steps: Compose::new(steps),
            p: check_p("RandomApply", p)?,
        })
    }

    /// Whether the steps run for the item of `key` (drawn apart from the steps' own draws).
    #[must_use]
    pub fn draw(&self, key: Key) -> bool {
        key.container_rng().chance(self.p)
    }

    /// The steps, as given.
    pub fn transforms(&self) -> &[Arc<dyn Transform>] {
        self.steps.transforms()
    }
}

impl Transform for RandomApply {
    fn apply(&self, index: u64, item: Item) -> Result<Item, Error> {
        self.apply_keyed(unkeyed(index), item)
    }

    fn apply_keyed(&self, key: Key, item: Item) -> Result<Item, Error> {
        if self.draw(key) {
            self.steps.apply_keyed(key, item)
        } else {
            Ok(item)
        }
    }
}

impl RandomParams for RandomApply {
    fn params(&self, key: Key, _height: usize, _width: usize) -> Result<Params, Error> {
        Ok(Params(vec![("apply", Value::Bool(self.draw(key)))]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Image, Layout, Pixels};

    fn row() -> Item {
        Item::Image(Image::new(1, 3, 1, Layout::Hwc, Pixels::U8(vec![1, 2, 3])).unwrap())
    }

    #[test]
    fn flips_follow_their_coin() {
        let t = RandomHorizontalFlip::new(0.5).unwrap();
        let (mut flipped, n) = (0, 2000);
        for i in 0..n {
            let key = Key::new(8, 0, i);
            let out = t.apply_keyed(key, row()).unwrap();
            let expected = if t.draw(key) {
                flipped += 1;
                vec![3, 2, 1]
            } else {
                vec![1, 2, 3]
            };
            let Item::Image(im) = out else { panic!() };
            assert_eq!(im.pixels(), &Pixels::U8(expected));
        }
        // 1000 ± 5 standard deviations (~ 22).
        assert!((890..=1110).contains(&flipped), "{flipped}");
        assert!(
            !RandomVerticalFlip::new(0.0)
                .unwrap()
                .draw(Key::new(1, 1, 1))
        );
        assert!(
            RandomVerticalFlip::new(1.0)
                .unwrap()
                .draw(Key::new(1, 1, 1))
        );
        assert!(RandomVerticalFlip::new(1.5).is_err());
    }

    #[test]
    fn random_apply_coin_is_apart_from_its_steps() {
        let flip: Arc<dyn Transform> = Arc::new(RandomHorizontalFlip::new(0.5).unwrap());
        let t = RandomApply::new(vec![flip], 0.5).unwrap();
        let mut both = [[0u32; 2]; 2];
        for i in 0..4000 {
            let key = Key::new(2, 0, i);
            let inner = RandomHorizontalFlip::new(0.5).unwrap().draw(key.at(0));
            both[usize::from(t.draw(key))][usize::from(inner)] += 1;
            let Item::Image(im) = t.apply_keyed(key, row()).unwrap() else {
                panic!()
            };
            let flipped = im.pixels() == &Pixels::U8(vec![3, 2, 1]);
            assert_eq!(flipped, t.draw(key) && inner);
        }
        // Independent coins: each of the four outcomes about a quarter.
        for c in both.iter().flatten() {
            assert!((850..=1150).contains(c), "{both:?}");
        }
        assert!(RandomApply::new(vec![], 0.5).is_err());
    }
}
