//! `Compose`: transforms applied in order, with runs of ToFloat, Normalize and ToChw fused into
//! one pass over the pixels.

use std::sync::Arc;

use crate::tensor::FloatPlan;
use crate::{Decode, Draft, Error, Item, Key, Reduced, Transform};

#[derive(Debug)]
enum Stage {
    /// A step and its position in the pipeline (its key is `key.at(position)`).
    One(usize, Arc<dyn Transform>),
    /// Consecutive per-value steps done in one pass.
    Fused(FloatPlan),
}

/// torchvision's `Compose(transforms)`.
///
/// The step at position `i` draws its random numbers from [`Key::at`]`(i)` of the key the
/// pipeline is given: steps never share draws, whatever each draws.
///
/// Built from shared steps ([`Compose::new`]), boxed ones (`From<Vec<Box<dyn Transform>>>`,
/// [`FromIterator`]), or one step at a time ([`Compose::then`], from [`Compose::default`], the
/// empty pipeline that returns its item unchanged).
#[derive(Debug, Default)]
pub struct Compose {
    transforms: Vec<Arc<dyn Transform>>,
    stages: Vec<Stage>,
    /// `(decoder, resizer)` stage pairs: a `Decode` (without a fixed draft size) and the step
    /// that resizes after it (past steps that keep the size), which names the part of the image
    /// it reads and, with [`Draft::Auto`], sets the reduction.
    drafts: Vec<(usize, usize)>,
}

impl Compose {
    /// The pipeline with `step` appended.
    #[must_use]
    pub fn then(self, step: impl Transform + 'static) -> Compose {
        let mut transforms = self.transforms;
        transforms.push(Arc::new(step));
        Compose::new(transforms)
    }

    /// The pipeline of `transforms`, in order; runs of two or more per-value steps
    /// (ToFloat, Normalize, ToChw) are fused into one pass over the pixels.
    pub fn new(transforms: Vec<Arc<dyn Transform>>) -> Compose {
        let mut stages = Vec::new();
        let mut i = 0;
        while i < transforms.len() {
            let mut plan = FloatPlan::default();
            let mut n = 0;
            while let Some(step) = transforms.get(i + n).and_then(|t| t.pointwise()) {
                if !plan.push(&step) {
                    break;
                }
                n += 1;
            }
            if n >= 2 {
                stages.push(Stage::Fused(plan));
                i += n;
            } else {
                stages.push(Stage::One(i, Arc::clone(&transforms[i])));
                i += 1;
            }
        }
        let mut drafts = Vec::new();
        for (d, stage) in stages.iter().enumerate() {
            let Stage::One(_, t) = stage else { continue };
            if as_decode(t.as_ref()).is_none_or(|d| matches!(d.draft(), Draft::Size { .. })) {
                continue;
            }
            let next = stages[d + 1..].iter().position(|s| match s {
                Stage::One(_, t) => !t.keeps_size(),
                Stage::Fused(_) => true,
            });
            if let Some(r) = next.map(|n| d + 1 + n)
                && let Stage::One(_, t) = &stages[r]
                && t.shrink(Key::new(0, 0, 0), 1, 1).is_some()
            {
                drafts.push((d, r));
            }
        }
        Compose {
            transforms,
            stages,
            drafts,
        }
    }

    /// The transforms, as given.
    pub fn transforms(&self) -> &[Arc<dyn Transform>] {
        &self.transforms
    }

    /// How many passes over the pixels `apply` makes (fused runs count once).
    pub fn passes(&self) -> usize {
        self.stages.len()
    }
}

impl From<Vec<Box<dyn Transform>>> for Compose {
    fn from(steps: Vec<Box<dyn Transform>>) -> Compose {
        steps.into_iter().collect()
    }
}

impl FromIterator<Box<dyn Transform>> for Compose {
    fn from_iter<I: IntoIterator<Item = Box<dyn Transform>>>(steps: I) -> Compose {
        Compose::new(steps.into_iter().map(Arc::from).collect())
    }
}

impl Transform for Compose {
    fn apply(&self, index: u64, item: Item) -> Result<Item, Error> {
        self.apply_keyed(Key::new(0, 0, index), item)
    }

    fn apply_keyed(&self, key: Key, mut item: Item) -> Result<Item, Error> {
        // A reduced decode: the resizing stage and the reduction.
        let mut reduced: Option<(usize, Reduced)> = None;
        for (s, stage) in self.stages.iter().enumerate() {
            item = match stage {
                Stage::One(i, t) => match (reduced, self.drafts.iter().find(|&&(d, _)| d == s)) {
                    (Some((r, from)), _) if r == s => {
                        reduced = None;
                        t.apply_reduced(key.at(*i), item, from)?
                    }
                    (_, Some(&(_, r))) => match (&item, as_decode(t.as_ref())) {
                        (Item::Bytes(data), Some(decode)) => {
                            let Stage::One(ri, resizer) = &self.stages[r] else {
                                unreachable!("a resizing stage is one step")
                            };
                            let rkey = key.at(*ri);
                            let auto = decode.draft() == Draft::Auto;
                            let plan = |h, w| {
                                let scale = match resizer.shrink(rkey, h, w) {
                                    Some(s) if auto => s.reduction(),
                                    _ => 1,
                                };
                                (scale, resizer.window(rkey, Reduced::whole((h, w), scale)))
                            };
                            let (im, from) = decode.decode_window(data, &plan)?;
                            if !from.is_whole() {
                                reduced = Some((r, from));
                            }
                            Item::Image(im)
                        }
                        _ => t.apply_keyed(key.at(*i), item)?,
                    },
                    _ => t.apply_keyed(key.at(*i), item)?,
                },
                Stage::Fused(plan) => Item::Image(plan.run(item)?),
            };
        }
        Ok(item)
    }
}

/// A step that is a [`Decode`], as one.
fn as_decode(step: &dyn Transform) -> Option<&Decode> {
    step.as_any()?.downcast_ref::<Decode>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Image, Layout, Normalize, Pixels, ToChw, ToFloat, ToHwc, ToRgb};

    #[derive(Debug)]
    struct AddIndex;

    impl Transform for AddIndex {
        fn apply(&self, index: u64, item: Item) -> Result<Item, Error> {
            let Item::Image(im) = item else {
                return Err(Error::arg("AddIndex", "not an image"));
            };
            let (h, w, c, l) = (im.height(), im.width(), im.channels(), im.layout());
            let Pixels::U8(v) = im.into_pixels() else {
                return Err(Error::arg("AddIndex", "not uint8"));
            };
            let v = v.into_iter().map(|x| x.wrapping_add(index as u8)).collect();
            Ok(Item::Image(Image::new(h, w, c, l, Pixels::U8(v))?))
        }
    }

    fn grey() -> Item {
        Item::Image(Image::new(1, 2, 1, Layout::Hwc, Pixels::U8(vec![10, 20])).unwrap())
    }

    #[test]
    fn applies_in_order_with_the_index() {
        let c = Compose::new(vec![
            Arc::new(AddIndex),
            Arc::new(ToRgb),
            Arc::new(AddIndex),
        ]);
        assert_eq!(c.passes(), 3);
        let Item::Image(im) = c.apply(5, grey()).unwrap() else {
            panic!()
        };
        assert_eq!(im.pixels(), &Pixels::U8(vec![20, 20, 20, 30, 30, 30]));
    }

    #[test]
    fn fuses_float_normalize_chw_with_the_same_values() {
        let steps: Vec<Arc<dyn Transform>> = vec![
            Arc::new(ToRgb),
            Arc::new(ToFloat::default()),
            Arc::new(Normalize::new(&[0.485, 0.456, 0.406], &[0.229, 0.224, 0.225]).unwrap()),
            Arc::new(ToChw),
            Arc::new(ToHwc),
        ];
        let fused = Compose::new(steps.clone());
        assert_eq!(fused.passes(), 3);
        let mut item = grey();
        for s in &steps {
            item = s.apply(0, item).unwrap();
        }
        assert_eq!(fused.apply(0, grey()).unwrap(), item);
        assert_eq!(fused.transforms().len(), 5);
    }

    #[test]
    fn builds_without_an_arc_per_step() {
        let norm = || Normalize::new(&[0.5], &[0.5]).unwrap();
        let by_hand = Compose::new(vec![
            Arc::new(ToFloat::default()),
            Arc::new(norm()),
            Arc::new(AddIndex),
        ]);
        let chained = Compose::default()
            .then(ToFloat::default())
            .then(norm())
            .then(AddIndex);
        let boxed = Compose::from(vec![
            Box::new(ToFloat::default()) as Box<dyn Transform>,
            Box::new(norm()),
            Box::new(AddIndex),
        ]);
        for c in [&chained, &boxed] {
            assert_eq!(c.passes(), by_hand.passes(), "the float steps are fused");
            assert_eq!(c.transforms().len(), 3);
            assert_eq!(c.apply(1, grey()), by_hand.apply(1, grey()));
        }
        assert_eq!(Compose::default().apply(0, grey()).unwrap(), grey());
    }

    /// Records the keys it is given.
    #[derive(Debug, Default)]
    struct Keys(std::sync::Mutex<Vec<Key>>);

    impl Transform for Keys {
        fn apply(&self, index: u64, item: Item) -> Result<Item, Error> {
            self.apply_keyed(Key::new(0, 0, index), item)
        }
        fn apply_keyed(&self, key: Key, item: Item) -> Result<Item, Error> {
            self.0.lock().unwrap().push(key);
            Ok(item)
        }
    }

    #[test]
    fn each_step_gets_the_key_at_its_position() {
        let probe = Arc::new(Keys::default());
        let norm: Arc<dyn Transform> = Arc::new(Normalize::new(&[0.5], &[0.5]).unwrap());
        // Positions 0 and 3 are probes; 1 and 2 are fused into one pass.
        let c = Compose::new(vec![
            probe.clone(),
            Arc::new(ToFloat::default()),
            norm,
            probe.clone(),
        ]);
        assert_eq!(c.passes(), 3);
        let key = Key::new(7, 2, 40);
        c.apply_keyed(key, grey()).unwrap();
        c.apply(5, grey()).unwrap();
        let seen = probe.0.lock().unwrap().clone();
        let plain = Key::new(0, 0, 5);
        assert_eq!(seen, [key.at(0), key.at(3), plain.at(0), plain.at(3)]);
        // A Compose inside a Compose passes on the path, not the inner position alone.
        let inner = Arc::new(Compose::new(vec![Arc::new(ToRgb), probe.clone()]));
        Compose::new(vec![Arc::new(ToRgb), inner])
            .apply_keyed(key, grey())
            .unwrap();
        assert_eq!(probe.0.lock().unwrap().last(), Some(&key.at(1).at(1)));
        assert_ne!(key.at(1).at(1), key.at(1));
    }

    #[test]
    fn every_transform_is_send_and_sync() {
        fn check<T: Send + Sync + 'static>() {}
        check::<Compose>();
        check::<crate::Decode>();
        check::<crate::Resize>();
        check::<crate::Pad>();
        check::<crate::PadTo>();
        check::<crate::CenterCrop>();
        check::<crate::Crop>();
        check::<crate::Rotate90>();
        check::<Normalize>();
        check::<crate::Image>();
        check::<Item>();
        check::<Error>();
    }

    #[test]
    fn errors_keep_the_transform_name() {
        let c = Compose::new(vec![
            Arc::new(Normalize::new(&[0.5], &[0.5]).unwrap()),
            Arc::new(ToChw),
        ]);
        assert_eq!(c.passes(), 1);
        let err = c.apply(0, grey()).unwrap_err();
        assert!(
            matches!(
                err,
                Error::WrongInput {
                    transform: "Normalize",
                    ..
                }
            ),
            "{err}"
        );
    }
}
